"""Writing a batch of run rows so that no refused row holds the others back.

The database may *refuse* a row (a value out of range, text it cannot store)
where it takes its neighbours: the batch is then written in halves until the
refused rows stand alone, the rest is committed, and each refused row is
written once more cut down (without its figures and result, its error saying
why), or dropped. ``StoreUnavailable`` (the database unreachable) is not a
refusal: it ends the batch, and the writer keeps what is left to write.
Runs on the writer's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from cronman.errors import StoreUnavailable
from cronman.models import Run, RunUpdate
from cronman.scheduler.fires import Cursor
from cronman.scheduler.runtime.metrics import NodeMetrics

log = logging.getLogger("cronman.scheduler.record.writer")
T = TypeVar("T")
REASON_CHARS = 300


@dataclass
class WriteBatch:
    """The rows of one flush. Rows leave it as they are committed, so a flush
    that fails half-way puts back only what is still to write."""

    claims: list[Run]
    cursors: list[Cursor]
    updates: dict[str, RunUpdate]
    unreachable: list[Run]
    updated: set[str] = field(default_factory=set)  # run ids of updates written
    inserted: set[str] = field(default_factory=set)  # claims now in the database (ours)
    foreign: set[str] = field(default_factory=set)  # claims whose row stood already
    written: int = 0  # commits made

    def updates_left(self) -> dict[str, RunUpdate]:
        # ``updates`` itself is not changed: the event loop reads it meanwhile.
        return {k: u for k, u in self.updates.items() if k not in self.updated}

    def left(self) -> int:
        return (len(self.claims) + len(self.cursors) + len(self.updates) - len(self.updated)
                + len(self.unreachable))


def reason_of(exc: BaseException) -> str:
    """The first line of an error, shortened (SQLAlchemy appends the whole statement)."""
    text = (str(getattr(exc, "orig", None) or exc) or type(exc).__name__).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:REASON_CHARS]


def _noted(error: str | None, note: str) -> str:
    return note if not error else f"{error}; {note}"


class Isolator:
    """Commits parts of a batch, cutting refused rows down or dropping them
    (counted in ``cronman_run_writes_refused_total``)."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self._metrics = metrics

    def write(self, batch: WriteBatch, items: list[T],
                  write: Callable[[Sequence[T]], object],
                  done: Callable[[Sequence[T], object], None],
                  cut: Callable[[T, str], T | None], what: str, *,
                  whole_failed: bool = False) -> None:
        """``write(items)`` in one commit; if the database refuses it, in halves
        until each refused row stands alone; such a row is written once more as
        ``cut(row, reason)`` (without what may have been refused), or dropped.
        ``done(part, result)`` follows each commit. ``StoreUnavailable`` is
        not a refusal: it ends the batch (the caller keeps what is left)."""
        if not items:
            return
        if not whole_failed:
            try:
                result = write(items)
            except StoreUnavailable:
                raise
            except Exception as exc:
                if len(items) == 1:
                    self._refused(batch, items[0], exc, write, done, cut, what)
                    return
            else:
                batch.written += 1
                done(items, result)
                return
        if len(items) == 1:  # refused before, alone
            try:
                write(items)
            except StoreUnavailable:
                raise
            except Exception as exc:
                self._refused(batch, items[0], exc, write, done, cut, what)
            return
        mid = len(items) // 2
        self.write(batch, items[:mid], write, done, cut, what)
        self.write(batch, items[mid:], write, done, cut, what)

    def _refused(self, batch: WriteBatch, item: T, exc: BaseException,
                 write: Callable[[Sequence[T]], object],
                 done: Callable[[Sequence[T], object], None],
                 cut: Callable[[T, str], T | None], what: str) -> None:
        reason = reason_of(exc)
        smaller = cut(item, reason)
        if smaller is not None:
            try:
                result = write([smaller])
            except StoreUnavailable:
                raise
            except Exception as again:
                reason = f"{reason}; cut down: {reason_of(again)}"
            else:
                batch.written += 1
                done([item], result)
                self._metrics.writes_refused.labels("cut").inc()
                log.error("the database refused a %s (%s): written without its figures "
                          "and result, the run's error says why", what, reason)
                return
        done([item], None)
        self._metrics.writes_refused.labels("dropped").inc()
        log.error("the database refused a %s (%s): dropped: %r", what, reason, item)



def cut_update(u: RunUpdate, reason: str) -> RunUpdate:
        return replace(u, lateness_ms=None, duration_ms=None, result=None,
                       error=_noted(u.error, f"this run's result could not be recorded: "
                                             f"the database refused it ({reason})"),
                       extra=dict(u.extra))

def cut_run(r: Run, reason: str) -> Run:
        return replace(r, lateness_ms=None, duration_ms=None, result=None, skipped_before=0,
                       error=_noted(r.error, f"this run's record was cut: the database "
                                             f"refused it ({reason})"))

def cut_cursor(c: Cursor, reason: str) -> Cursor:
        return (c[0], c[1], 0)
