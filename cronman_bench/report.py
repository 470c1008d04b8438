"""From receiver arrivals to figures, and from figures to a table and JSON.

``Tally`` is fed arrivals (incrementally while a run goes on, then the rest
after the receiver stopped) and matches them against the fires the workload
owes in the measured window: a pair (job, fire time) is *delivered* when it
arrived at least once, *missed* when it never did, *duplicated* when it
arrived more than once. A duplicated pair is told apart by its arrivals'
``Cronman-Attempt`` and ``Cronman-Run-Id``: *doubled* when two first attempts
(or two different runs) of it arrived -- two dispatches of one fire --,
*redelivered* when a later attempt of the same run arrived after an earlier
one (a retry, or the lease sweeper re-dispatching a run whose node died).
Lateness is first arrival minus fire time, on the receiver's clock.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cronman_bench.receiver import Arrival
from cronman_bench.workload import Jobs

Number = TypeVar("Number", int, float)


def percentile(sorted_values: Sequence[Number], q: float) -> Number | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def lateness_summary(values: Iterable[int]) -> dict[str, Any]:
    v = sorted(values)
    return {
        "count": len(v),
        "p50_ms": percentile(v, 50),
        "p95_ms": percentile(v, 95),
        "p99_ms": percentile(v, 99),
        "max_ms": v[-1] if v else None,
        "min_ms": v[0] if v else None,
    }


class PairRecord:
    """The arrivals of one owed (job, fire time)."""

    __slots__ = ("first_ms", "first_attempt_no", "arrivals", "first_attempts", "run_id",
                 "other_run")

    def __init__(self, a: Arrival) -> None:
        self.first_ms = a.arrived_ms
        self.first_attempt_no = a.attempt  # attempt of the earliest arrival
        self.arrivals = 1
        self.first_attempts = 1 if a.attempt <= 1 else 0
        self.run_id = a.run_id
        self.other_run = False  # an arrival carried another run id: a second run

    def add(self, a: Arrival) -> None:
        self.arrivals += 1
        if a.attempt <= 1:
            self.first_attempts += 1
        if a.run_id != self.run_id:
            self.other_run = True
        if a.arrived_ms < self.first_ms:
            self.first_ms, self.first_attempt_no = a.arrived_ms, a.attempt

    @property
    def doubled(self) -> bool:
        """Dispatched twice: two first attempts, or two runs, of one fire."""
        return self.first_attempts > 1 or self.other_run

    @property
    def redeliveries(self) -> int:
        """Extra arrivals that were later attempts (not a second first attempt)."""
        return self.arrivals - 1 - max(self.first_attempts - 1, 0)


class Tally:
    """Arrivals matched against the fires owed in [start_ms, end_ms)."""

    def __init__(self, workload: Jobs, keys: Sequence[str], start_ms: int,
                 end_ms: int) -> None:
        self.w = workload
        self.keys = list(keys)
        self.index = {k: i for i, k in enumerate(keys)}
        self.start_ms = start_ms
        self.end_ms = end_ms
        # (job index, fire ms) -> PairRecord
        self.pairs: dict[tuple[int, int], PairRecord] = {}
        self.arrivals = 0
        self.outside_window = 0
        self.stray = 0  # unknown job, or a fire time that is not on the job's grid
        self.retries = 0  # arrivals with Cronman-Attempt > 1
        self.first_arrival_ms: int | None = None
        self.last_arrival_ms: int | None = None
        self.last_new_pair_ms: int | None = None
        self._hist: dict[int, int] = {}  # arrivals of any fire per 100 ms of arrival time

    def set_window(self, start_ms: int, end_ms: int) -> None:
        """Fix the window, or narrow it: pairs already counted outside it are dropped."""
        self.start_ms, self.end_ms = start_ms, end_ms
        for key in [k for k in self.pairs if not start_ms <= k[1] < end_ms]:
            self.outside_window += self.pairs.pop(key).arrivals

    def add(self, a: Arrival) -> bool:
        """Count one arrival; True when it is the first of an owed pair."""
        self.arrivals += 1
        if self.first_arrival_ms is None:
            self.first_arrival_ms = a.arrived_ms
        self.last_arrival_ms = a.arrived_ms
        slot = a.arrived_ms // 100
        self._hist[slot] = self._hist.get(slot, 0) + 1
        if a.attempt > 1:
            self.retries += 1
        i = self.index.get(a.job_id)
        t = a.scheduled_ms
        if i is None or t is None:
            self.stray += 1
            return False
        if not self.w.on_grid(i, t):
            self.stray += 1
            return False
        if not self.start_ms <= t < self.end_ms:
            self.outside_window += 1
            return False
        rec = self.pairs.get((i, t))
        if rec is None:
            self.pairs[(i, t)] = PairRecord(a)
            self.last_new_pair_ms = a.arrived_ms
            return True
        rec.add(a)
        return False

    def arrivals_between(self, lo_ms: int, hi_ms: int) -> int:
        """Arrivals of any fire received in [lo_ms, hi_ms) (to 100 ms)."""
        lo, hi = lo_ms // 100, hi_ms // 100
        return sum(n for slot, n in self._hist.items() if lo <= slot < hi)

    def expected(self) -> int:
        return self.w.expected_count(self.start_ms, self.end_ms)

    def lateness(self, since_ms: int | None = None, until_ms: int | None = None) -> list[int]:
        """Lateness of delivered pairs whose fire time is in [since, until)."""
        lo = self.start_ms if since_ms is None else since_ms
        hi = self.end_ms if until_ms is None else until_ms
        return [rec.first_ms - t for (_i, t), rec in self.pairs.items() if lo <= t < hi]

    def kinds(self, since_ms: int | None = None, until_ms: int | None = None
              ) -> dict[str, int]:
        """Duplicated, doubled, redelivered and sweeper-first pairs due in [since, until)."""
        lo = self.start_ms if since_ms is None else since_ms
        hi = self.end_ms if until_ms is None else until_ms
        out = {"duplicated_pairs": 0, "duplicate_deliveries": 0, "doubled_pairs": 0,
               "redelivered_pairs": 0, "redeliveries": 0, "first_by_later_attempt": 0}
        for (_i, t), rec in self.pairs.items():
            if not lo <= t < hi:
                continue
            if rec.arrivals > 1:
                out["duplicated_pairs"] += 1
                out["duplicate_deliveries"] += rec.arrivals - 1
            if rec.doubled:
                out["doubled_pairs"] += 1
            if rec.redeliveries:
                out["redelivered_pairs"] += 1
                out["redeliveries"] += rec.redeliveries
            if rec.first_attempt_no > 1:
                out["first_by_later_attempt"] += 1
        return out

    def summary(self, expected: int | None = None) -> dict[str, Any]:
        """The phase's delivery figures (``expected`` may be passed if known)."""
        exp = self.expected() if expected is None else expected
        delivered = len(self.pairs)
        seconds = (self.end_ms - self.start_ms) / 1000.0
        late = lateness_summary(rec.first_ms - t for (_i, t), rec in self.pairs.items())
        last = max((rec.first_ms for rec in self.pairs.values()), default=None)
        return {
            "window_s": seconds,
            "expected": exp,
            "delivered_unique": delivered,
            "missed": exp - delivered,
            **self.kinds(),
            "fires_per_s": round(delivered / seconds, 1) if seconds > 0 else None,
            "received_per_s": round(self.arrivals_between(self.start_ms, self.end_ms) / seconds,
                                    1) if seconds > 0 else None,
            "lateness": late,
            "last_arrival_after_window_start_ms": None if last is None else last - self.start_ms,
            "missed_sample": self.missed_sample() if delivered < exp else [],
            "arrivals_total": self.arrivals,
            "arrivals_outside_window": self.outside_window,
            "arrivals_stray": self.stray,
            "retries": self.retries,
        }

    def missed_sample(self, limit: int = 20) -> list[dict[str, Any]]:
        """The first owed pairs (by fire time) that never arrived."""
        missing = sorted((t, i) for i, t in self.w.expected(self.start_ms, self.end_ms)
                         if (i, t) not in self.pairs)
        return [{"job": self.keys[i], "scheduled_ms": t,
                 "offset_s": round((t - self.start_ms) / 1000, 3)} for t, i in missing[:limit]]

    def buckets(self, bucket_ms: int = 1000) -> list[dict[str, Any]]:
        """Per fire-time bucket: owed, delivered, p99 lateness (for steady-state)."""
        owed: dict[int, int] = {}
        for _i, t in self.w.expected(self.start_ms, self.end_ms):
            b = (t - self.start_ms) // bucket_ms
            owed[b] = owed.get(b, 0) + 1
        got: dict[int, list[int]] = {}
        for (_i, t), rec in self.pairs.items():
            got.setdefault((t - self.start_ms) // bucket_ms, []).append(rec.first_ms - t)
        out = []
        for b in sorted(owed):
            late = sorted(got.get(b, []))
            out.append({"offset_s": b * bucket_ms / 1000.0, "expected": owed[b],
                        "delivered": len(late), "p99_ms": percentile(late, 99)})
        return out


def steady_after(tally: Tally, p99_limit_ms: int, bucket_ms: int = 1000,
                 min_tail_s: float = 10.0) -> float | None:
    """Offset (s, from the window's start) where the steady state begins.

    That is the first second *b* such that from *b* to the window's end every
    owed fire arrived, the fires of second *b* itself and all the fires from
    *b* on (together) have p99 lateness within the limit, and at least
    ``min_tail_s`` of window remain -- robust to one slow second on a busy
    machine, strict about anything missing. None when no such second exists.
    """
    owed = _owed_buckets(tally, bucket_ms)
    got: dict[int, list[int]] = {}
    for (_i, t), rec in tally.pairs.items():
        got.setdefault((t - tally.start_ms) // bucket_ms, []).append(rec.first_ms - t)
    last = (tally.end_ms - tally.start_ms - 1) // bucket_ms
    b = _steady_bucket(owed, got, last, p99_limit_ms, min_tail_s * 1000 / bucket_ms)
    return None if b is None else b * bucket_ms / 1000


def _owed_buckets(tally: Tally, bucket_ms: int) -> dict[int, int]:
    owed: dict[int, int] = {}
    for _i, t in tally.w.expected(tally.start_ms, tally.end_ms):
        b = (t - tally.start_ms) // bucket_ms
        owed[b] = owed.get(b, 0) + 1
    return owed


def _over_allowed(n: int) -> int:
    """How many of n values may exceed a limit with the nearest-rank p99 within it."""
    return n - max(1, math.ceil(0.99 * n)) if n else 0


def _steady_bucket(owed: dict[int, int], got: dict[int, list[int]], last: int,
                   p99_limit_ms: int, min_tail_buckets: float) -> int | None:
    """``steady_after`` on buckets up to ``last``: the first steady bucket, or None."""
    candidates = sorted(b for b in owed if b <= last)
    complete_from: int | None = None  # every bucket from here on got all its fires
    tail_ok: dict[int, bool] = {}  # p99 of all the fires from this bucket on is within
    n = over = 0
    complete = True
    for b in reversed(candidates):
        values = got.get(b, ())
        complete = complete and len(values) == owed[b]
        if complete:
            complete_from = b
        n += len(values)
        over += sum(1 for v in values if v > p99_limit_ms)
        tail_ok[b] = over <= _over_allowed(n)
    if complete_from is None:
        return None
    for b in candidates:
        if b < complete_from:
            continue
        if last - b + 1 < min_tail_buckets:
            return None
        own = got[b]
        if sum(1 for v in own if v > p99_limit_ms) > _over_allowed(len(own)):
            continue
        if tail_ok[b]:
            return b
    return None


class SteadyWatch:
    """Steady state while a cold start runs, to end its window once it has held.

    Fed the first arrival of each owed pair; ``end_ms`` answers, at ``now``,
    the window end at which steady state (``steady_after``'s rule, on the fires
    due at least ``grace_ms`` ago) has held for ``hold_s`` after both its own
    start and ``loaded_ms`` (when the last process finished loading).
    """

    def __init__(self, tally: Tally, p99_limit_ms: int, hold_s: float,
                 grace_ms: int = 2000, bucket_ms: int = 1000) -> None:
        self.start_ms = tally.start_ms
        self.limit = p99_limit_ms
        self.hold_ms = int(hold_s * 1000)
        self.grace_ms = grace_ms
        self.bucket_ms = bucket_ms
        self.owed = _owed_buckets(tally, bucket_ms)
        self.got: dict[int, list[int]] = {}

    def add(self, a: Arrival) -> None:
        if a.scheduled_ms is not None and a.lateness_ms is not None:
            b = (a.scheduled_ms - self.start_ms) // self.bucket_ms
            self.got.setdefault(b, []).append(a.lateness_ms)

    def end_ms(self, now_ms: int, loaded_ms: int) -> int | None:
        last = (now_ms - self.grace_ms - self.start_ms) // self.bucket_ms - 1
        if last < 0:
            return None
        b = _steady_bucket(self.owed, self.got, last, self.limit, 0)
        if b is None:
            return None
        steady_ms = max(self.start_ms + b * self.bucket_ms, loaded_ms)
        end = self.start_ms + (last + 1) * self.bucket_ms
        return end if end - steady_ms >= self.hold_ms else None


# ---------------------------------------------------------------- presentation

_ROWS: tuple[tuple[str, str, str], ...] = (
    # (label, dotted key in a phase result, format)
    ("fires/s delivered", "delivery.fires_per_s", "{:,.1f}"),
    ("callbacks/s during window", "delivery.received_per_s", "{:,.1f}"),
    ("expected fires", "delivery.expected", "{:,}"),
    ("delivered (unique)", "delivery.delivered_unique", "{:,}"),
    ("missed", "delivery.missed", "{:,}"),
    ("duplicated pairs", "delivery.duplicated_pairs", "{:,}"),
    ("  doubled (2 dispatches)", "delivery.doubled_pairs", "{:,}"),
    ("  redelivered (later attempt)", "delivery.redelivered_pairs", "{:,}"),
    ("first sent by a later attempt", "delivery.first_by_later_attempt", "{:,}"),
    ("lateness p50 ms", "delivery.lateness.p50_ms", "{:,}"),
    ("lateness p95 ms", "delivery.lateness.p95_ms", "{:,}"),
    ("lateness p99 ms", "delivery.lateness.p99_ms", "{:,}"),
    ("lateness max ms", "delivery.lateness.max_ms", "{:,}"),
    ("CPU s (window, all procs)", "cost.cpu_s_window", "{:,.2f}"),
    ("CPU ms per fire", "cost.cpu_ms_per_fire", "{:,.3f}"),
    ("  by kind: scheduler", "cost.cpu_ms_per_fire_by_kind.scheduler", "{:,.3f}"),
    ("  by kind: PostgreSQL", "cost.cpu_ms_per_fire_by_kind.postgresql", "{:,.3f}"),
    ("  by kind: Redis", "cost.cpu_ms_per_fire_by_kind.redis", "{:,.3f}"),
    ("  all but the receiver", "cost.cpu_ms_per_fire_by_kind.total", "{:,.3f}"),
    ("  receiver (nginx)", "cost.cpu_ms_per_fire_by_kind.receiver", "{:,.3f}"),
    ("peak RSS MB (max proc)", "cost.peak_rss_mb_max", "{:,.1f}"),
    ("PG commits per fire", "cost.pg_commits_per_fire", "{:,.3f}"),
    ("Redis commands per fire", "cost.redis_commands_per_fire", "{:,.2f}"),
)

# Rows where a ratio cronman/peer reads naturally (higher or lower is better).
_RATIO_ROWS = {"fires/s delivered", "callbacks/s during window", "lateness p50 ms",
               "lateness p99 ms", "lateness max ms", "CPU ms per fire", "peak RSS MB (max proc)",
               "  all but the receiver"}


def dig(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _fmt(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or b == 0:
        return "-"
    r = a / b
    if r <= 0 or r >= 0.1:
        return f"{r:,.2f}x"
    return f"1/{1 / r:,.0f}x"


def format_table(phases: Sequence[dict[str, Any]], extra_rows: Sequence[tuple[str, str, str]] = ()
                 ) -> str:
    """One column per phase (system), one row per figure, plus cronman/peer ratios.

    Never raises: the figures matter more than their presentation.
    """
    try:
        return _format_table(phases, extra_rows)
    except Exception as exc:  # noqa: BLE001 - a run's results must survive a table bug
        return f"(table could not be formatted: {exc!r}; see the JSON)"


def _format_table(phases: Sequence[dict[str, Any]], extra_rows: Sequence[tuple[str, str, str]]
                  ) -> str:
    if not phases:
        return "(no results)"
    names = [p["system"] for p in phases]
    base = next((p for p in phases if p["system"] == "cronman"), None)
    peers = [p for p in phases if p is not base]
    header = ["", *names] + ([f"cronman/{p['system']}" for p in peers] if base else [])
    rows = [header]
    for label, key, fmt in (*_ROWS, *extra_rows):
        values = [dig(p, key) for p in phases]
        if all(v is None for v in values):
            continue
        row = [label, *(_fmt(v, fmt) for v in values)]
        if base:
            for p in peers:
                row.append(_ratio(dig(base, key), dig(p, key)) if label in _RATIO_ROWS else "")
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = []
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [r[c].rjust(widths[c]) for c in range(1, len(r))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """What the figures were taken on."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    for name, argv in (("nginx", ["nginx", "-v"]), ("redis", ["redis-server", "--version"]),
                       ("git_commit", ["git", "describe", "--always", "--dirty"])):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=5,
                                 cwd=Path(__file__).resolve().parents[1])
            info[name] = (out.stdout or out.stderr).strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import apscheduler

        info["apscheduler"] = apscheduler.__version__
    except ImportError:
        pass
    return info


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
