"""The names of the coordinator's Redis keys (their layout: ``coordination.redis``)."""

from __future__ import annotations

MEMBERS_KEY = "{prefix}:members"
MEMBER_KEY = "{prefix}:member:{node_id}"
LOCK_KEY = "{prefix}:lock:{job_id}:{fire_ms}"
OUTCOME_KEY = "{prefix}:outcome:{run_id}"
PULSE_KEY = "{prefix}:pulse:{node_id}"
MEMBERSHIP_KEY = "{prefix}:membership"


class RedisKeys:
    """Key names under one prefix (``settings.redis_key_prefix``)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.members = MEMBERS_KEY.format(prefix=prefix)
        self.member_prefix = MEMBER_KEY.format(prefix=prefix, node_id="")
        self.membership = MEMBERSHIP_KEY.format(prefix=prefix)

    def member(self, node_id: str) -> str:
        return MEMBER_KEY.format(prefix=self.prefix, node_id=node_id)

    def lock(self, job_id: str, fire_ms: int) -> str:
        # LOCK_KEY, built as an f-string: several times per fire, and
        # ``str.format`` with keywords costs about twice as much.
        return f"{self.prefix}:lock:{job_id}:{int(fire_ms)}"

    def pulse(self, node_id: str) -> str:
        return PULSE_KEY.format(prefix=self.prefix, node_id=node_id)

    def outcome(self, run_id: str) -> str:
        return f"{self.prefix}:outcome:{run_id}"  # OUTCOME_KEY (per fire, as ``lock``)
