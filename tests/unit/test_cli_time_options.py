"""The CLI's time options (``TIME``) and day options (``DAY``): RFC 3339, ``now``, a time
relative to now, and for days a bare date."""

from __future__ import annotations

from datetime import date, timedelta

import click
import pytest
from click.testing import CliRunner

from cronman.cli.options import DAY, TIME
from cronman.timeutil import utcnow


@click.command()
@click.option("--since", type=TIME)
@click.option("--day", type=DAY)
def show(since: str | None, day: date | None) -> None:
    click.echo(f"{since}|{day}")


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(show, list(args))
    return res.exit_code, res.output.strip()


@pytest.mark.parametrize("raw", ["now", "-1h", "-90m", "-1h30m", "-7d", "-2w",
                                 "2026-11-13T04:13:22Z", "2026-11-13T05:13:22+01:00"])
def test_times_pass_as_given(raw):
    assert invoke("--since", raw) == (0, f"{raw}|None")


@pytest.mark.parametrize("raw", ["yesterday", "-1y", "-", "1h", "2026-11-13", "-1m1h", ""])
def test_other_times_are_usage_errors_naming_the_option_and_the_forms(raw):
    code, out = invoke("--since", raw)
    assert code == 2 and "'--since'" in out and "relative to now (-1h" in out


def test_days_take_a_date_or_any_time():
    today = utcnow().date()
    assert invoke("--day", "2026-11-13") == (0, "None|2026-11-13")
    assert invoke("--day", "now") == (0, f"None|{today}")
    week_ago = (utcnow() - timedelta(days=7)).date()
    assert invoke("--day", "-7d")[1] in (f"None|{week_ago}", f"None|{week_ago + timedelta(1)}")
    assert invoke("--day", "2026-11-13T23:30:00-02:00") == (0, "None|2026-11-14")
    code, out = invoke("--day", "last week")
    assert code == 2 and "'--day'" in out and "a day (2026-11-13)" in out
