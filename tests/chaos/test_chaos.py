"""The short seeded chaos run (issue 39): a real cluster of three scheduler
nodes on PostgreSQL and Redis, the real API and the nginx receiver behind
the nemesis' proxy, at a steady rate with a herd every few seconds, while the
nemesis pauses, kills and restarts nodes and the API, slows the receiver,
restarts a node with its clock off, fails Redis over under Sentinel, takes
PostgreSQL away, SIGKILLs ``cronman worker`` mid-run and (as root) partitions
node n2, which runs in a network namespace of its own, from Redis,
PostgreSQL and the receiver, or makes its links slow or lossy. (The
container agent's SIGKILL is drawn in the long run only: its containerd
costs more than this run can spend.) Every fire owed in the window must be
accounted for and every API write answered 2xx still there (``checker``).

``CRONMAN_CHAOS_SEED`` picks another seed (the report prints the one used),
``CRONMAN_CHAOS_DIR`` a directory that keeps the processes' logs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.run import ChaosConfig, chaos_rig, run_chaos

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow, pytest.mark.serial]

SEED = int(os.environ.get("CRONMAN_CHAOS_SEED", "39"))
# Where the processes' logs go (kept; default the test's temporary directory).
WORKDIR = os.environ.get("CRONMAN_CHAOS_DIR")


def test_seeded_chaos_run_accounts_for_every_fire(tmp_path):
    config = ChaosConfig(seed=SEED, window_s=75.0, worker_jobs=20)
    workdir = Path(WORKDIR) if WORKDIR else tmp_path
    print(f"logs in {workdir}")
    with chaos_rig(workdir, worker=True) as rig:
        out = run_chaos(rig, config, echo=print)
    text = out.report()
    print(text)
    assert not out.errors, text
    assert out.planned and len({p.kind for p in out.planned}) >= 5, text
    assert out.writes > 0, text
    counts = out.result.counts()
    assert counts["once"] + counts["same_run"] > 0.9 * len(out.result.verdicts), text
    assert out.result.ok(), text
