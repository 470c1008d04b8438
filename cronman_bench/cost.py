"""CPU seconds of a run's processes, by kind, between any two moments.

The kinds: ``scheduler`` (cronman's nodes, or the peer's scheduler
processes), ``postgresql`` (the server backends connected to the run's own
scratch databases -- client backends, autovacuum workers and parallel
workers of those databases, never another database's sessions), ``redis``
(the private redis-server the run started) and ``receiver`` (nginx, master
and workers); the tracing scenario adds ``otlp_receiver``. PostgreSQL's shared background processes (WAL writer,
checkpointer) serve every database on the server and are not counted.

Processes come and go (a connection pool opens a backend, an nginx worker
restarts): the meter is sampled every second and keeps, per process, the
CPU it had when first seen and when last seen. Between two snapshots a
process counts its CPU at the later one minus its CPU at the earlier one; a
process born after the earlier snapshot counts all of its CPU; one that was
alive but not yet seen then counts from its first sight (an undercount of at
most one sampling interval); one that exited counts until its last sample.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("scheduler", "postgresql", "redis", "receiver")
# What the system is measured against, never counted in its ``total`` (the
# tracing scenario's OTLP receiver besides nginx).
RECEIVER_KINDS = ("receiver", "otlp_receiver")
_CLK_TCK = os.sysconf("SC_CLK_TCK")

PidSource = Callable[[], Iterable[int]]
# A process, told apart from a later one that reuses its pid.
ProcKey = tuple[int, int]


def uptime_ticks() -> int:
    """Clock ticks since boot now: the clock of a process's start time in /proc."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * _CLK_TCK)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces: split after its closing paren.
    return stat[stat.rindex(")") + 2:].split()


def read_cpu(pid: int) -> tuple[int, float] | None:
    """(start in clock ticks since boot, CPU seconds) of a live process."""
    f = _stat_fields(pid)
    if f is None or f[0] == "Z":
        return None
    return int(f[19]), (int(f[11]) + int(f[12])) / _CLK_TCK


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (scanning /proc: no kernel option needed)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        f = _stat_fields(int(entry.name))
        if f is not None and int(f[1]) == pid:
            out.append(int(entry.name))
    return out


def with_children(pids: Callable[[], Iterable[int]]) -> PidSource:
    """A source of some processes and their direct children (nginx's workers)."""
    def source() -> list[int]:
        out = []
        for pid in pids():
            out.append(pid)
            out.extend(children_of(pid))
        return out
    return source


@dataclass
class _Seen:
    kind: str
    started: int  # clock ticks since boot
    first_cpu: float
    last_cpu: float


@dataclass(frozen=True)
class Snapshot:
    """The CPU of every process seen so far, as of ``at`` (Unix time; ``ticks``:
    clock ticks since boot, the clock of process start times)."""

    at: float
    ticks: int
    cpu: dict[ProcKey, float]


@dataclass
class CpuMeter:
    """Samples the processes of each kind; answers CPU per kind between snapshots."""

    sources: list[tuple[str, PidSource]] = field(default_factory=list)
    _seen: dict[ProcKey, _Seen] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, kind: str, source: PidSource) -> None:
        self.sources.append((kind, source))

    def sample(self) -> None:
        for kind, source in self.sources:
            try:
                pids = list(source())
            except Exception as exc:  # noqa: BLE001 - a lost sample must not end a run
                if len(self.errors) < 20:
                    self.errors.append(f"{kind}: {exc!r}")
                continue
            for pid in pids:
                got = read_cpu(pid)
                if got is None:
                    continue
                started, cpu = got
                key = (pid, started)
                seen = self._seen.get(key)
                if seen is None:
                    self._seen[key] = _Seen(kind, started, cpu, cpu)
                else:
                    seen.last_cpu = cpu

    def snapshot(self) -> Snapshot:
        ticks = uptime_ticks()
        self.sample()
        return Snapshot(time.time(), ticks, {k: s.last_cpu for k, s in self._seen.items()})

    def between(self, a: Snapshot, b: Snapshot) -> dict[str, float]:
        """CPU seconds per kind spent between two snapshots (every kind present)."""
        out = {kind: 0.0 for kind, _ in self.sources}
        for key, cpu in b.cpu.items():
            seen = self._seen[key]
            if key in a.cpu:
                base = a.cpu[key]
            elif seen.started >= a.ticks:
                base = 0.0
            else:
                base = seen.first_cpu
            out[seen.kind] = out.get(seen.kind, 0.0) + max(0.0, cpu - base)
        return out

    def processes(self, kind: str, a: Snapshot, b: Snapshot) -> int:
        """How many processes of ``kind`` used CPU between the snapshots."""
        return sum(1 for key, cpu in b.cpu.items() if self._seen[key].kind == kind
                   and cpu > a.cpu.get(key, 0.0))


def per_fire(cpu_by_kind: dict[str, float], fires: int) -> dict[str, float | None]:
    """CPU ms per fire for each kind, and ``total`` (every kind but the receivers)."""
    out: dict[str, float | None] = {}
    for kind, cpu in cpu_by_kind.items():
        out[kind] = round(cpu * 1000 / fires, 3) if fires else None
    system = sum(v for k, v in cpu_by_kind.items() if k not in RECEIVER_KINDS)
    out["total"] = round(system * 1000 / fires, 3) if fires else None
    return out
