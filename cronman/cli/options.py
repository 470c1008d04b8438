"""What every client command shares: ``--url``, ``--token``, ``-o``, errors, progress.

An API error prints its message and field and exits non-zero: 1 for a
refused request, 3 when the API cannot be reached or is unavailable.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE
from cronman.cli.output import FORMATS
from cronman.client import DEFAULT_URL, ApiError, CronmanClient, Unavailable

# Connections the CLI's client keeps per host: the most requests a command
# (``jobs apply --parallel``) has in flight at once.
MAX_PARALLEL = 32

T = TypeVar("T")


def exit_code(exc: ApiError) -> int:
    return RET_UNAVAILABLE if isinstance(exc, Unavailable) else RET_ERROR


def fail(exc: ApiError, prefix: str = "error") -> None:
    click.echo(f"{prefix}: {exc}", err=True)
    sys.exit(exit_code(exc))


def client_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --url, --token, -o/--output (and --json); the command gets ``client`` and ``fmt``."""

    @click.option("--url", envvar="CRONMAN_URL", default=DEFAULT_URL, show_default=True,
                  help="the API's base URL [env CRONMAN_URL]")
    @click.option("--token", envvar="CRONMAN_TOKEN", default=None,
                  help="API token [env CRONMAN_TOKEN]")
    @click.option("-o", "--output", "fmt", type=click.Choice(FORMATS), default="table",
                  show_default=True, help="output format")
    @click.option("--json", "as_json", is_flag=True, help="same as -o json")
    @functools.wraps(func)
    def wrapper(url: str, token: str | None, fmt: str, as_json: bool, **kwargs: Any) -> None:
        client = CronmanClient(url, token or None, pool_size=MAX_PARALLEL)
        try:
            func(client=client, fmt="json" if as_json else fmt, **kwargs)
        except ApiError as exc:
            fail(exc)
        finally:
            client.close()

    return wrapper


class Progress:
    """A progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, bar: Any | None) -> None:
        self._bar = bar

    def advance(self, n: int) -> None:
        if self._bar is not None and n:
            self._bar.update(n)


@contextmanager
def progress(total: int, label: str, *, minimum: int = 2) -> Iterator[Progress]:
    """``with progress(n, "creating jobs") as bar: bar.advance(k)``; no bar below ``minimum``."""
    if total < minimum or not sys.stderr.isatty():
        yield Progress(None)
        return
    with click.progressbar(length=total, label=label, file=sys.stderr,
                           show_pos=True, show_eta=True) as bar:
        yield Progress(bar)


def collect(items: Iterable[T], noun: str, every: int) -> list[T]:
    """Every item of a paging iterator (``--all``), counting on stderr when it is a
    terminal (every ``every`` items: a page)."""
    out: list[T] = []
    tty = sys.stderr.isatty()
    for item in items:
        out.append(item)
        if tty and len(out) % every == 0:
            click.echo(f"\rfetched {len(out)} {noun}…", err=True, nl=False)
    if tty and len(out) >= every:
        click.echo("\r" + " " * 40 + "\r", err=True, nl=False)
    return out


def first_page_only(cursor: str | None) -> None:
    """``--all`` reads from the first page: refuse a ``--cursor`` with it."""
    if cursor is not None:
        raise click.UsageError("--all starts at the first page: drop --cursor")


def more_hint(fmt: str, noun: str, cursor: str | None) -> None:
    """After one page in a human format: say that there is more, and how to get it."""
    if cursor and fmt in ("table", "wide"):
        click.echo(f"(more {noun}: use --all, or --cursor {cursor} for the next page)",
                   err=True)
