"""The node's cyclic-GC thresholds (``node.GC_THRESHOLDS``).

Fires come and go in batches (claimed a hundred or so at a time, started,
finished), next to a backlog of held runs; their objects are freed by
reference counting. With the node's thresholds that flow brings no
collection -- least of all a full one, which would walk the whole backlog --
and the rare reference cycle is still collected.
"""

from __future__ import annotations

import gc
import sys
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from cronman import eventloop
from cronman.coordination.memory import InProcessCoordinator
from cronman.scheduler.node import GC_THRESHOLDS
from tests.unit.test_node_faults import db, make_node, store  # noqa: F401  (fixtures)

BACKLOG = 30_000  # held runs, each a few container objects
BATCHES = 1_000
BATCH = 200  # fires claimed at a time
IN_FLIGHT = 10  # batches alive at once (claimed, waiting, in their attempts)


@pytest.fixture
def collections() -> Iterator[list[tuple[int, int]]]:
    """(generation, objects collected) of each collection made meanwhile."""
    seen: list[tuple[int, int]] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append((info["generation"], info["collected"]))

    assert gc.isenabled()
    thresholds = gc.get_threshold()
    # The rest of the process out of the way: a full collection waits until
    # the objects promoted since the last outnumber a quarter of the old
    # generation, which a test suite's own objects would otherwise make.
    gc.freeze()
    gc.collect()
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def fire_objects(i: int) -> dict[str, object]:
    """Roughly what one fire allocates: a run, its job, a task's state."""
    return {"attempt": [1], "job": {"id": str(i), "target": {}}, "task": [i]}


def flow(collections: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Hold a backlog, then let ``BATCHES`` batches of fires come and go: the
    collections made while they flowed."""
    backlog = [fire_objects(i) for i in range(BACKLOG)]
    gc.collect()  # the young count starts from 0, whatever the backlog left in it
    collections.clear()
    in_flight: deque[list[dict[str, object]]] = deque(maxlen=IN_FLIGHT)
    for b in range(BATCHES):
        in_flight.append([fire_objects(b * BATCH + i) for i in range(BATCH)])
    assert len(backlog) == BACKLOG
    return list(collections)


def test_fires_flowing_in_batches_bring_no_collection(
        collections: list[tuple[int, int]]) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    assert flow(collections) == []


def test_with_the_default_thresholds_the_same_flow_brings_full_collections(
        collections: list[tuple[int, int]]) -> None:
    # What the thresholds are for: by default each batch is collected, the
    # fires in flight are promoted, and the backlog is walked again and again.
    gc.set_threshold(700, 10, 10)
    made = flow(collections)
    assert len(made) >= BATCHES
    assert any(generation == 2 for generation, _ in made)


def test_reference_cycles_are_still_collected(collections: list[tuple[int, int]]) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    for i in range(4 * GC_THRESHOLDS[0] + GC_THRESHOLDS[0] // 2):
        cycle: list[object] = [i]
        cycle.append(cycle)
    assert sum(collected for _, collected in collections) >= 3 * GC_THRESHOLDS[0]
    assert gc.collect() <= GC_THRESHOLDS[0]


def test_the_node_process_runs_with_these_thresholds(
        monkeypatch: pytest.MonkeyPatch, db: str, store: Any) -> None:  # noqa: F811
    node = make_node(db, store, InProcessCoordinator(ttl=2.0))
    seen: list[tuple[int, int, int]] = []

    def run(main: Coroutine[Any, Any, None], _choice: str) -> None:
        seen.append(gc.get_threshold())
        main.close()

    monkeypatch.setattr(eventloop, "run", run)
    thresholds, switch = gc.get_threshold(), sys.getswitchinterval()
    try:
        node.run()
    finally:
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(switch)
    assert seen == [GC_THRESHOLDS]
