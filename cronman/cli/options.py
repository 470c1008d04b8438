"""What every client command shares: ``--url``, ``--token``, ``-o``, errors, progress,
how a job is named (``JOB``: an id, ``namespace/name``, or a name with ``-n``) and
how a time is given (``TIME``: RFC 3339, ``now``, or relative to now: ``-1h``).

An API error prints its message and field and exits non-zero: 1 for a
refused request, 3 when the API cannot be reached or is unavailable. The
message names the CLI's own spelling: the API's ``force`` parameter is
``--force`` here, and a 401 says how to give a token.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import date
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE
from cronman.cli.output import FORMATS
from cronman.client import DEFAULT_URL, ApiError, CronmanClient, Unauthenticated, Unavailable
from cronman.timeutil import TIME_HINT, parse_time_text

# Connections the CLI's client keeps per host: the most requests a command
# (``jobs apply --parallel``) has in flight at once.
MAX_PARALLEL = 32

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

TIME_HELP = "RFC 3339, 'now', or relative to now: -1h, -30m, -1h30m, -7d"
JOB_HELP = "JOB is a job id, namespace/name, or a name (in -n NAMESPACE)"
# Fields of API errors that are options of the command that sent the request.
FIELD_FLAGS = {"force": "--force", "Idempotency-Key": "--idempotency-key"}
TOKEN_HINT = "give a token with --token or CRONMAN_TOKEN"
WRONG_TOKEN_HINT = "check the token given by --token or CRONMAN_TOKEN"


def exit_code(exc: ApiError) -> int:
    return RET_UNAVAILABLE if isinstance(exc, Unavailable) else RET_ERROR


def describe(exc: ApiError, *, token_given: bool = False) -> str:
    """An API error as the CLI says it: its field as the CLI's flag, a 401 with the way
    to give a token (or to check the one given)."""
    field = FIELD_FLAGS.get(exc.field or "", exc.field)
    text = str(exc.with_field(field)) if field != exc.field else str(exc)
    if isinstance(exc, Unauthenticated):
        text += f"; {WRONG_TOKEN_HINT if token_given else TOKEN_HINT}"
    return text


def fail(exc: ApiError, prefix: str = "error", *, token_given: bool = False) -> None:
    click.echo(f"{prefix}: {describe(exc, token_given=token_given)}", err=True)
    sys.exit(exit_code(exc))


if TYPE_CHECKING:  # generic from click 8.2 on; the package allows 8.1
    _StrParam = click.ParamType[str, Any]
    _DayParam = click.ParamType[date, Any]
else:
    _StrParam = _DayParam = click.ParamType


class TimeParam(_StrParam):
    """A time option: RFC 3339, ``now`` or relative to now (``-1h``), checked here and
    passed on as given (the client reads ``now`` and ``-1h`` when it sends it)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value).strip()
        try:
            parse_time_text(text)
        except ValueError:
            self.fail(f"must be {TIME_HINT}, not {value!r}", param, ctx)
        return text


TIME = TimeParam()


class DayParam(_DayParam):
    """A day option: ``2026-11-13``, or a time in any of ``TIME``'s forms (its UTC day)."""

    name = "day"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> date:
        if isinstance(value, date):
            return value
        text = str(value).strip()
        try:
            return date.fromisoformat(text) if len(text) == 10 else parse_time_text(text).date()
        except ValueError:
            self.fail(f"must be a day (2026-11-13) or {TIME_HINT}, not {value!r}", param, ctx)


DAY = DayParam()


def job_namespace(func: F) -> F:
    """``-n/--namespace``: where a bare job name given to the command lives."""
    return click.option("--namespace", "-n", default=None,
                        help="the namespace of a JOB given as a bare name")(func)


def idempotency_key(func: F) -> F:
    """``--idempotency-key``: the key the command's call sends (``idempotency_key``)."""
    return click.option(
        "--idempotency-key", default=None, metavar="KEY",
        help="send this Idempotency-Key (1-255 printable ASCII characters): the same "
             "command with the same key and arguments, again within 24 h, answers as the "
             "first did and makes nothing more; the key with other arguments is refused "
             "(without it, each command sends a new key)")(func)


def api_options(func: F) -> F:
    """--url and --token (``url``, ``token``), as every client command takes them."""
    func = click.option("--token", envvar="CRONMAN_TOKEN", default=None,
                        help="API token [env CRONMAN_TOKEN]")(func)
    return click.option("--url", envvar="CRONMAN_URL", default=DEFAULT_URL, show_default=True,
                        help="the API's base URL [env CRONMAN_URL]")(func)


def client_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --url, --token, -o/--output (and --json); the command gets ``client`` and ``fmt``."""

    @api_options
    @click.option("-o", "--output", "fmt", type=click.Choice(FORMATS), default="table",
                  show_default=True, help="output format")
    @click.option("--json", "as_json", is_flag=True, help="same as -o json")
    @functools.wraps(func)
    def wrapper(url: str, token: str | None, fmt: str, as_json: bool, **kwargs: Any) -> None:
        client = CronmanClient(url, token or None, pool_size=MAX_PARALLEL)
        try:
            func(client=client, fmt="json" if as_json else fmt, **kwargs)
        except ApiError as exc:
            fail(exc, token_given=bool(token))
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
