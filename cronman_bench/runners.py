"""Every scenario by name (``cronman bench --scenario NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cronman_bench.overload import overload
from cronman_bench.priority_herd import priority_herd
from cronman_bench.scenarios import ScenarioParams, herd, kill, max_rate, million, steady
from cronman_bench.skew import skew
from cronman_bench.systems import BenchOptions

Runner = Callable[[BenchOptions, ScenarioParams], dict[str, Any]]

RUNNERS: dict[str, Runner] = {
    "steady": steady, "max-rate": max_rate, "herd": herd, "million": million, "kill": kill,
    "overload": overload, "priority-herd": priority_herd, "skew": skew,
}
SCENARIOS = tuple(RUNNERS)
