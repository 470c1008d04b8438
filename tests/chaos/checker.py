"""The chaos checker: every (job, fire time) the schedules owed, accounted for.

Pure: it is handed the fires owed in a window (from the job definitions
alone), the receiver's log (``Arrival``: job id, run id, scheduled-for,
attempt, arrival time), the run table (``RunRow``), the faults applied
(``Fault``, wall times) and the API writes answered 2xx, and decides per
owed fire one outcome:

- ``once``: delivered once;
- ``same_run``: delivered more than once, every time with the same run id
  and a new attempt number (allowed: receivers dedupe on the run id; for
  an ``at_most_once`` job a violation);
- ``different_runs``: delivered with two run ids (a violation);
- ``repeated_attempt``: one run id delivered twice with the same attempt
  number (a violation: two nodes sent it, or a re-delivery claimed to be
  a first try);
- ``documented_loss``: never delivered, and its run row says so with a
  status (``failed``, ``skipped``, or ``lost`` for an ``at_most_once`` job:
  an ``at_least_once`` run is dispatched again instead) and an error (SPEC
  §6: nothing is silently lost);
- ``missed``: never delivered and no row, or a row without an error (a
  violation).

Across those, a delivered fire is ``early`` when its first arrival came
before its time minus the clock bound, and ``late`` when it came later
than the bound of the faults around it (``Bounds``): both violations. And
every API write answered 2xx must still be there (``check_writes``).

On a violation ``describe`` prints the fire, its arrivals and run row, the
faults within ±10 s of it and the nodes' log lines around it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cronman.timeutil import format_rfc3339, from_ms
from cronman_bench.receiver import Arrival

ONCE = "once"
SAME_RUN = "same_run"
DIFFERENT_RUNS = "different_runs"
REPEATED_ATTEMPT = "repeated_attempt"
DOCUMENTED_LOSS = "documented_loss"
MISSED = "missed"
OUTCOMES = (ONCE, SAME_RUN, DIFFERENT_RUNS, REPEATED_ATTEMPT, DOCUMENTED_LOSS, MISSED)
# Flags a delivered fire may carry besides its outcome.
EARLY = "early"
LATE = "late"
AT_MOST_ONCE_TWICE = "at_most_once_twice"  # flag: an at_most_once job's fire sent again
VIOLATIONS = frozenset({DIFFERENT_RUNS, REPEATED_ATTEMPT, MISSED, EARLY, LATE,
                        AT_MOST_ONCE_TWICE})
# Statuses a run row may end in without being delivered, when it says why.
LOSS_STATUSES = frozenset({"lost", "failed", "skipped"})
STEADY = "steady"  # the fault kind of fires away from every fault
AROUND_MS = 10_000  # faults this close to a fire are printed with it


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault applied: its kind, what it hit and when (wall ms)."""

    kind: str
    target: str
    start_ms: int
    end_ms: int
    detail: str = ""

    def __str__(self) -> str:
        span = (self.end_ms - self.start_ms) / 1000
        return (f"{self.kind} of {self.target} at {_wall(self.start_ms)} for {span:.1f} s"
                + (f" ({self.detail})" if self.detail else ""))


@dataclass(frozen=True, slots=True)
class RunRow:
    """What the run table holds of one fire."""

    job_id: str
    scheduled_ms: int
    run_id: str
    status: str
    attempt: int
    error: str | None = None
    node_id: str | None = None


@dataclass(frozen=True, slots=True)
class Write:
    """An API write answered 2xx: a job created, or updated to ``version``."""

    op: str  # "create" or "update"
    job_id: str
    version: int
    answered_ms: int


@dataclass(frozen=True, slots=True)
class LogLine:
    node: str
    at_ms: int
    text: str


@dataclass(frozen=True)
class Bounds:
    """How late a fire may arrive: ``late_ms`` in the steady state, plus, for
    each fault of kind K near it (due from ``before_ms`` before the fault
    started until ``after_ms[K]`` after it ended), ``late_by_kind[K]`` and the
    fault's own length (a paused node's fires wait at least that long):
    faults that overlap or follow one another add their delays up (the API
    killed twice while a run waits to be claimed through it). A kind not
    in ``late_by_kind`` adds nothing. ``early_ms``: the clock bound (arrival
    before the fire time minus this is early)."""

    early_ms: int = 100
    late_ms: int = 5_000
    late_by_kind: Mapping[str, int] = field(default_factory=dict)
    after_ms: Mapping[str, int] = field(default_factory=dict)
    before_ms: int = 2_000
    default_after_ms: int = 10_000

    def window(self, f: Fault) -> tuple[int, int]:
        """The fire times a fault may make late: [lo, hi)."""
        return (f.start_ms - self.before_ms,
                f.end_ms + self.after_ms.get(f.kind, self.default_after_ms))

    def late_bound(self, faults: Sequence[Fault]) -> int:
        bound = self.late_ms
        for f in faults:
            extra = self.late_by_kind.get(f.kind)
            if extra is not None:
                bound += extra + (f.end_ms - f.start_ms)
        return bound


@dataclass
class Verdict:
    """One owed fire: its outcome, flags, first lateness and the faults near it."""

    job_id: str
    fire_ms: int
    outcome: str
    flags: tuple[str, ...] = ()
    lateness_ms: int | None = None
    arrivals: list[Arrival] = field(default_factory=list)
    row: RunRow | None = None
    faults: list[Fault] = field(default_factory=list)  # those whose window holds it
    bound_ms: int = 0

    @property
    def violations(self) -> list[str]:
        found = [self.outcome] if self.outcome in VIOLATIONS else []
        return found + [f for f in self.flags if f in VIOLATIONS]

    @property
    def kinds(self) -> set[str]:
        return {f.kind for f in self.faults} or {STEADY}


@dataclass
class Result:
    """Every owed fire's verdict, the arrivals owed nothing, the lost writes."""

    verdicts: list[Verdict]
    unexpected: list[Arrival]
    lost_writes: list[str]
    faults: list[Fault]
    window: tuple[int, int]
    # The steady state's median lateness measured apart (a window full of
    # faults has no fire away from them); None: the median of those away.
    baseline_ms: int | None = None

    @property
    def violations(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.violations]

    def ok(self) -> bool:
        return not self.violations and not self.unexpected and not self.lost_writes

    def counts(self, kind: str | None = None) -> dict[str, int]:
        """Outcomes and flags of the fires near a fault of ``kind`` (all: None)."""
        out = dict.fromkeys((*OUTCOMES, EARLY, LATE, AT_MOST_ONCE_TWICE), 0)
        for v in self.verdicts:
            if kind is None or kind in v.kinds:
                out[v.outcome] += 1
                for flag in v.flags:
                    out[flag] += 1
        return out

    def steady_median_ms(self) -> int:
        if self.baseline_ms is not None:
            return self.baseline_ms
        late = sorted(v.lateness_ms for v in self.verdicts
                      if v.lateness_ms is not None and not v.faults)
        return late[len(late) // 2] if late else 0

    def extra_lateness(self, kind: str) -> tuple[int | None, int | None]:
        """p99 and max of the first arrivals' lateness beyond the steady
        median, for the fires near a fault of ``kind`` (``STEADY``: near none)."""
        base = self.steady_median_ms()
        extra = sorted(v.lateness_ms - base for v in self.verdicts
                       if v.lateness_ms is not None and kind in v.kinds)
        if not extra:
            return None, None
        return extra[min(len(extra) - 1, int(len(extra) * 0.99))], extra[-1]

    def table(self) -> str:
        """Per fault kind: faults applied, fires owed near them, each outcome,
        extra lateness p99/max (ms)."""
        kinds = sorted({f.kind for f in self.faults})
        flags = (EARLY, LATE, AT_MOST_ONCE_TWICE)
        head = ["kind", "faults", "owed", *OUTCOMES, *flags, "extra p99", "extra max"]
        rows = [head]
        for kind in [*kinds, STEADY, "all"]:
            c = self.counts(None if kind == "all" else kind)
            p99, top = self.extra_lateness(kind) if kind != "all" else (None, None)
            n = sum(1 for f in self.faults if f.kind == kind) if kind in kinds else "-"
            rows.append([kind, str(n), str(sum(c[o] for o in OUTCOMES)),
                         *(str(c[o]) for o in (*OUTCOMES, *flags)),
                         "-" if p99 is None else str(p99), "-" if top is None else str(top)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))
                 for r in rows]
        if self.unexpected:
            lines.append(f"arrivals that are no fire owed: {len(self.unexpected)}")
        if self.lost_writes:
            lines.append(f"API writes answered 2xx and lost: {len(self.lost_writes)}")
        return "\n".join(lines)


def check(owed: Iterable[tuple[str, int]], arrivals: Iterable[Arrival],
          rows: Iterable[RunRow], faults: Sequence[Fault], window: tuple[int, int],
          bounds: Bounds, *, writes: Sequence[Write] = (),
          jobs_now: Mapping[str, int] | None = None,
          baseline_ms: int | None = None,
          at_most_once: Collection[str] = ()) -> Result:
    """Decide every owed (job id, fire ms) of ``window`` ([start, end) wall ms).

    Arrivals of fires due outside the window are not judged (the warm-up's,
    the drain's); arrivals inside it that no schedule owed are returned as
    ``unexpected``. ``jobs_now``: job id -> version as the store holds them
    now, for ``check_writes`` (None: writes are not checked). ``baseline_ms``:
    the steady median lateness that extra lateness is measured from.
    ``at_most_once``: the ids of jobs whose fires may never arrive twice."""
    start, end = window
    got: dict[tuple[str, int], list[Arrival]] = defaultdict(list)
    for a in arrivals:
        if a.scheduled_ms is not None and start <= a.scheduled_ms < end:
            got[(a.job_id, a.scheduled_ms)].append(a)
    by_fire = {(r.job_id, r.scheduled_ms): r for r in rows}
    spans = sorted(((*bounds.window(f), f) for f in faults), key=lambda s: s[0])
    verdicts: list[Verdict] = []
    owed_keys: set[tuple[str, int]] = set()
    for job_id, fire_ms in owed:
        key = (job_id, fire_ms)
        owed_keys.add(key)
        near = [f for lo, hi, f in spans if lo <= fire_ms < hi]
        verdicts.append(_judge(job_id, fire_ms, got.get(key, []), by_fire.get(key), near,
                               bounds, job_id in at_most_once))
    unexpected = [a for key, seen in got.items() if key not in owed_keys for a in seen]
    lost = [] if jobs_now is None else check_writes(writes, jobs_now)
    return Result(verdicts, unexpected, lost, list(faults), window, baseline_ms)


def _judge(job_id: str, fire_ms: int, seen: list[Arrival], row: RunRow | None,
           near: list[Fault], bounds: Bounds, at_most_once: bool = False) -> Verdict:
    v = Verdict(job_id, fire_ms, MISSED, row=row, faults=near,
                bound_ms=bounds.late_bound(near), arrivals=sorted(seen,
                                                                  key=lambda a: a.arrived_ms))
    if not seen:
        if row is not None and row.error and row.status in LOSS_STATUSES and (
                row.status != "lost" or at_most_once):
            # ``lost`` is the documented end of an at_most_once run only: an
            # at_least_once run whose node died is dispatched again.
            v.outcome = DOCUMENTED_LOSS
        return v
    first = v.arrivals[0]
    v.lateness_ms = first.arrived_ms - fire_ms
    runs = {a.run_id for a in seen}
    attempts = [(a.run_id, a.attempt) for a in seen]
    if len(runs) > 1:
        v.outcome = DIFFERENT_RUNS
    elif len(set(attempts)) < len(attempts):
        v.outcome = REPEATED_ATTEMPT
    else:
        v.outcome = ONCE if len(seen) == 1 else SAME_RUN
    flags = []
    if v.lateness_ms < -bounds.early_ms:
        flags.append(EARLY)
    if v.lateness_ms > v.bound_ms:
        flags.append(LATE)
    if at_most_once and len(seen) > 1:
        flags.append(AT_MOST_ONCE_TWICE)
    v.flags = tuple(flags)
    return v


def check_writes(writes: Sequence[Write], jobs_now: Mapping[str, int]) -> list[str]:
    """The API writes answered 2xx that are not there any more: a created job
    missing, or a job at a version below the one an update was answered with."""
    lost = []
    for w in writes:
        version = jobs_now.get(w.job_id)
        if version is None:
            lost.append(f"{w.op} of job {w.job_id} answered at {_wall(w.answered_ms)}: "
                        "the job is gone")
        elif version < w.version:
            lost.append(f"{w.op} of job {w.job_id} to version {w.version} answered at "
                        f"{_wall(w.answered_ms)}: the job is at version {version}")
    return lost


# -- printing --------------------------------------------------------------

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def parse_log(node: str, text: str) -> list[LogLine]:
    """A node's text log (``time LEVEL logger: message``, the time in UTC) as
    dated lines; a line without a time (a traceback's) gets the one before."""
    out: list[LogLine] = []
    at = 0
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            at = int(t.timestamp()) * 1000 + int(m.group(2))
        if at:
            out.append(LogLine(node, at, line))
    return out


def describe(v: Verdict, faults: Sequence[Fault], logs: Sequence[LogLine], *,
             around_ms: int = AROUND_MS, log_ms: int = 2_000, max_lines: int = 40) -> str:
    """A violation for a person: the fire, what arrived, its run row, the
    faults within ``around_ms`` of it and the log lines within ``log_ms`` of
    its time (and of its arrivals) or naming its job."""
    lines = [f"{', '.join(v.violations)}: job {v.job_id} fire {_wall(v.fire_ms)} "
             f"(late bound {v.bound_ms} ms)"]
    for a in v.arrivals:
        lines.append(f"  arrived {_wall(a.arrived_ms)} ({a.arrived_ms - v.fire_ms:+d} ms) "
                     f"run {a.run_id} attempt {a.attempt}")
    if not v.arrivals:
        lines.append("  never arrived")
    r = v.row
    lines.append("  run row: none" if r is None else
                 f"  run row: {r.run_id} {r.status} attempt {r.attempt} node {r.node_id} "
                 f"error {r.error!r}")
    close = [f for f in faults
             if f.start_ms - around_ms <= v.fire_ms <= f.end_ms + around_ms]
    secs = around_ms // 1000
    lines.append(f"  faults within ±{secs} s:" if close else f"  no fault within ±{secs} s")
    lines += [f"    {f}" for f in close]
    times = [v.fire_ms, *(a.arrived_ms for a in v.arrivals)]
    shown = [ln for ln in logs
             if v.job_id in ln.text
             or (any(abs(ln.at_ms - t) <= log_ms for t in times) and _telling(ln.text))]
    shown.sort(key=lambda ln: ln.at_ms)
    if len(shown) > max_lines:
        shown = [ln for ln in shown if v.job_id in ln.text] or shown
        shown = shown[:max_lines]
    lines.append(f"  log lines ({len(shown)}):")
    lines += [f"    [{ln.node}] {ln.text}" for ln in shown]
    return "\n".join(lines)


def _telling(text: str) -> bool:
    """Log lines worth showing beside a fire: warnings and errors, recoveries."""
    return any(w in text for w in (" WARNING ", " ERROR ", " CRITICAL ", "re-dispatching",
                                   "took over", "recorded"))


def report(result: Result, logs: Sequence[LogLine], limit: int = 10) -> str:
    """The table, then up to ``limit`` violations described: the first of
    each kind of violation, then the next ones in order."""
    parts = [result.table()]
    bad = result.violations
    shown: list[Verdict] = []
    kinds: set[str] = set()
    for v in bad:  # one of each kind first: a common one must not hide a rare one
        kind = v.violations[0]
        if kind not in kinds:
            kinds.add(kind)
            shown.append(v)
    firsts = {id(v) for v in shown}
    shown += [v for v in bad if id(v) not in firsts]
    for v in shown[:limit]:
        parts.append(describe(v, result.faults, logs))
    if len(bad) > limit:
        parts.append(f"... and {len(bad) - limit} more violations")
    for a in result.unexpected[:limit]:
        parts.append(f"unexpected arrival: {a}")
    parts += result.lost_writes[:limit]
    return "\n\n".join(parts)


def _wall(ms: int) -> str:
    return format_rfc3339(from_ms(ms))
