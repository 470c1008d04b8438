"""Every scenario by name (``cronman bench --scenario NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cronman_bench.chaos import chaos
from cronman_bench.herd import herd
from cronman_bench.kill import kill
from cronman_bench.limit_accuracy import limit_accuracy
from cronman_bench.limits_cost import limits_cost
from cronman_bench.max_rate import max_rate
from cronman_bench.million import million
from cronman_bench.overload import overload
from cronman_bench.patroni_failover import patroni_failover
from cronman_bench.priority_herd import priority_herd
from cronman_bench.scenarios import ScenarioParams, steady
from cronman_bench.skew import skew
from cronman_bench.systems import BenchOptions
from cronman_bench.tracing import tracing
from cronman_bench.work_queue import work_queue

Runner = Callable[[BenchOptions, ScenarioParams], dict[str, Any]]

RUNNERS: dict[str, Runner] = {
    "steady": steady, "max-rate": max_rate, "herd": herd, "million": million, "kill": kill,
    "overload": overload, "priority-herd": priority_herd, "skew": skew,
    "patroni-failover": patroni_failover, "chaos": chaos, "work-queue": work_queue,
    "limits": limits_cost, "limit-accuracy": limit_accuracy, "tracing": tracing,
}
# `all`: what runs on any machine with PostgreSQL and Redis (patroni-failover
# needs Patroni, etcd and root or the postgres user; chaos, a source checkout
# with its tests, and its own --minutes; tracing, the tracing extra).
SCENARIOS = tuple(n for n in RUNNERS if n not in ("patroni-failover", "chaos", "tracing"))
