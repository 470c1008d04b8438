"""The coordinator's key names follow the layout their templates document."""

from __future__ import annotations

from cronman.coordination.redis_keys import LOCK_KEY, OUTCOME_KEY, PULSE_KEY, RedisKeys


def test_per_fire_keys_follow_their_templates():
    keys = RedisKeys("cronman:test")
    assert keys.lock("job-1", 1795815035000) == LOCK_KEY.format(
        prefix="cronman:test", job_id="job-1", fire_ms=1795815035000)
    # A fire time given as a float (ms) names the same lock.
    assert keys.lock("job-1", 1795815035000.0) == keys.lock("job-1", 1795815035000)
    assert keys.outcome("run-1") == OUTCOME_KEY.format(prefix="cronman:test", run_id="run-1")
    assert keys.pulse("n1") == PULSE_KEY.format(prefix="cronman:test", node_id="n1")
