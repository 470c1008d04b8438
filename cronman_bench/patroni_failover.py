"""The patroni-failover scenario: steady load on a cluster whose database is
PostgreSQL under Patroni (etcd and two members on loopback, ``PatroniCluster``);
the leader's Patroni and postmaster SIGKILLed mid-window, once with
synchronous mode on and once off.

Figures per phase: seconds without a successful database write (a probe
commits a transaction on the multi-host URL every 50 ms), lost and doubled
fires, lateness p99/max around the failover against steady, the run rows the
nodes kept (``cronman_pending_run_writes`` summed over the nodes, its peak)
and how long after the first successful write they took to drain.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg2

from cronman_bench import nodemetrics
from cronman_bench.harness import run_phase, steady_window
from cronman_bench.kill import kill_figures
from cronman_bench.patroni import PatroniCluster
from cronman_bench.procs import BenchError
from cronman_bench.report import dig, format_table
from cronman_bench.scenarios import ScenarioParams, _param, past_anchors
from cronman_bench.systems import BenchOptions, CronmanSystem

PROBE_EVERY_S = 0.05
PENDING = "cronman_pending_run_writes"


class PatroniDatabase:
    """The bench database on a Patroni cluster: what ``CronmanSystem`` asks of
    its scratch database (``url``, ``create``, ``xact_commit``, ``drop``)."""

    name = "cronman"

    def __init__(self, synchronous_mode: bool, tag: str) -> None:
        self.cluster = PatroniCluster(members=2, scope=f"cronman-{tag}",
                                      synchronous_mode=synchronous_mode)
        self.url = ""
        self._commits = 0

    def create(self) -> PatroniDatabase:
        self.cluster.__enter__()
        self.cluster.create_database("cronman")
        self.url = self.cluster.url("cronman", connect_timeout="2")
        return self

    def dsn(self) -> str:
        hosts = ",".join("127.0.0.1" for _ in self.cluster.members)
        ports = ",".join(str(m.pg_port) for m in self.cluster.members)
        return (f"host={hosts} port={ports} dbname=cronman user=postgres "
                "target_session_attrs=read-write connect_timeout=1")

    def xact_commit(self) -> int:
        leader = self.cluster.leader()
        if leader is not None:
            try:
                rows = self.cluster.query(leader, "SELECT xact_commit FROM pg_stat_database "
                                          "WHERE datname = 'cronman'")
                self._commits = int(str(rows[0][0])) if rows else self._commits
            except psycopg2.Error:
                pass
        return self._commits

    def drop(self) -> None:
        self.cluster.close()


class KilledLeader:
    """What the harness reads of a killed process: its name and when."""

    def __init__(self, name: str, pid: int | None) -> None:
        self.name = name
        self.pid = pid  # its Patroni's
        self.killed_at: float = time.time()


class PatroniSystem(CronmanSystem):
    """``CronmanSystem`` on a Patroni cluster; ``kill_one`` kills the database leader."""

    def __init__(self, opts: BenchOptions, tag: str, synchronous_mode: bool) -> None:
        super().__init__(opts, tag)
        self.db = PatroniDatabase(synchronous_mode, tag)  # type: ignore[assignment]
        self.probe_thread = WriteProbe(self)
        self.killed: KilledLeader | None = None

    def start(self) -> None:
        super().start()
        self.probe_thread.start()

    def kill_one(self) -> Any:
        cluster = self.db.cluster  # type: ignore[attr-defined]
        leader = cluster.leader()
        pid = leader.patroni_pid() if leader is not None else None
        self.killed = KilledLeader(f"database leader {cluster.kill_leader().name}", pid)
        return self.killed

    def teardown(self) -> None:
        try:
            self.probe_thread.stop()
        finally:
            super().teardown()  # stops the Patroni cluster too (``db.drop``)


class WriteProbe:
    """Commits on the multi-host URL every 50 ms and samples the nodes' kept rows."""

    def __init__(self, system: PatroniSystem) -> None:
        self.system = system
        self.writes: list[float] = []  # wall times of successful commits
        self.pending: list[tuple[float, float]] = []  # (wall time, rows kept, all nodes)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, daemon=True),
                         threading.Thread(target=self._sample, daemon=True)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(5)

    def _write(self) -> None:
        db: PatroniDatabase = self.system.db  # type: ignore[assignment]
        conn: Any = None
        while not self._stop.wait(PROBE_EVERY_S):
            try:
                if conn is None or conn.closed:
                    conn = psycopg2.connect(db.dsn())
                    conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("SELECT txid_current()")  # an xid: only a primary gives one
                self.writes.append(time.time())
            except psycopg2.Error:
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            ports = list(self.system.metrics_ports.values())
            kept = sum(nodemetrics.total(nodemetrics.scrape(p, timeout=1), PENDING)
                       for p in ports)
            self.pending.append((time.time(), kept))

    def figures(self, killed_at: float) -> dict[str, Any]:
        before = [t for t in self.writes if t <= killed_at]
        after = [t for t in self.writes if t > killed_at]
        last_ok = before[-1] if before else killed_at
        first_ok = after[0] if after else None
        out: dict[str, Any] = {"no_write_s": None, "rows_kept_peak": None, "drain_s": None}
        if first_ok is None:
            return out
        out["no_write_s"] = round(first_ok - last_ok, 2)
        steady = max((k for t, k in self.pending if t <= killed_at), default=0.0)
        around = [(t, k) for t, k in self.pending if t > killed_at]
        out["rows_kept_peak"] = int(max((k for _t, k in around), default=0.0))
        drained = next((t for t, k in around if t >= first_ok and k <= max(steady, 50)), None)
        out["drain_s"] = None if drained is None else round(drained - first_ok, 2)
        return out


def patroni_failover(opts: BenchOptions, params: ScenarioParams) -> dict[str, Any]:
    """Steady load; the database leader SIGKILLed mid-window; synchronous mode on, then off."""
    jobs = int(_param("patroni-failover", params, "jobs"))
    every = int(_param("patroni-failover", params, "every"))
    duration = float(_param("patroni-failover", params, "duration"))
    kill_at = params.kill_at if params.kill_at is not None else duration / 3
    if not 0 < kill_at < duration:
        raise BenchError(f"--kill-at ({kill_at:g} s) must lie inside the window "
                         f"(0 .. {duration:g} s)")
    settle = 25.0  # ~ttl for the promotion, then the kept rows' drain
    phases: list[dict[str, Any]] = []
    for sync in (True, False):
        label = f"patroni-{'sync' if sync else 'async'}"
        opts.echo(f"{label}: {jobs:,} jobs every {every} s ({jobs / every:,.0f} fires/s), "
                  f"{duration:.0f} s measured, the database leader SIGKILLed {kill_at:.0f} s "
                  f"into it, {opts.nodes} nodes, synchronous_mode {sync}")
        system = PatroniSystem(opts, label, sync)
        o = run_phase(system, past_anchors(jobs, every), steady_window(opts.warmup, duration),
                      opts, label=label, kill_after_s=kill_at, settle_after_kill_s=settle,
                      drain_max=max(opts.drain_max, settle + 30))
        res = o.result
        res["synchronous_mode"] = sync
        if o.killed is None or system.killed is None:
            res["notes"].append("the leader was not killed (the window ended first)")
        else:
            k = kill_figures(o, opts.heartbeat_ttl, system)
            seg = k["segments"]
            steady_p99 = dig(seg, "steady.lateness.p99_ms")
            around_p99 = dig(seg, "around_kill.lateness.p99_ms")
            res["failover"] = {
                **system.probe_thread.figures(system.killed.killed_at),
                "segments": seg,
                "lost": res["delivery"]["missed"],
                "doubled": res["delivery"]["doubled_pairs"],
                "extra_p99_ms": (around_p99 - steady_p99)
                if steady_p99 is not None and around_p99 is not None else None,
                "max_around_ms": dig(seg, "around_kill.lateness.max_ms"),
            }
        phases.append(res)
    table = format_table(phases, extra_rows=(
        ("synchronous_mode", "synchronous_mode", "{}"),
        ("seconds without a database write", "failover.no_write_s", "{}"),
        ("lost (missed)", "failover.lost", "{:,}"),
        ("doubled", "failover.doubled", "{:,}"),
        ("p99 steady, ms", "failover.segments.steady.lateness.p99_ms", "{:,}"),
        ("extra p99 around the failover, ms", "failover.extra_p99_ms", "{:,}"),
        ("max around the failover, ms", "failover.max_around_ms", "{:,}"),
        ("run rows kept (peak, all nodes)", "failover.rows_kept_peak", "{:,}"),
        ("kept rows drained after the first write, s", "failover.drain_s", "{}"),
    ))
    return {"scenario": "patroni-failover",
            "params": {"jobs": jobs, "every_s": every, "duration_s": duration,
                       "kill_at_s": kill_at, "nodes": opts.nodes},
            "phases": phases, "table": table}
