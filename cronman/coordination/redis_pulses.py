"""Pulses on Redis: a node's own pulse written and its peers' read in one
``pulse.lua`` call on every shard (a pulse must survive any one of them).
Pulses go out from a thread of their own, so they may wait on a shard the
event loop's calls skip while it backs off."""

from __future__ import annotations

import time
from collections.abc import Sequence

from cronman.coordination.base import Pulse, PulseReading
from cronman.coordination.redis_keys import RedisKeys
from cronman.coordination.redis_shardset import SHARD_ERRORS, ShardSet


class RedisPulses:
    """Pulses over the shards; the first reachable shard's clock is the reference."""

    def __init__(self, shards: ShardSet, keys: RedisKeys) -> None:
        self._shards = shards
        self._keys = keys

    def pulse(self, node_id: str, payload: str, ttl_ms: int,
              peers: Sequence[str]) -> PulseReading:
        pulse_key = self._keys.pulse
        keys = [pulse_key(node_id), *(pulse_key(p) for p in peers)]
        args: list[str | int] = [payload, max(1, int(ttl_ms))]
        reading: PulseReading | None = None
        found: dict[str, Pulse] = {}
        shards = self._shards
        # A shard backing off after an error is skipped while another can
        # take the pulse. With none, each is tried anyway: one timeout under
        # load must not silence a live node's pulses (its peers would take
        # its fires over), and a pulse that gets through ends the back-off.
        last_resort = not any(shard.available() for shard in shards.shards)
        for shard in shards.shards:
            if not (last_resort or shard.available()):
                continue
            sent = time.monotonic()
            try:
                reply = shards.scripts.get(shard, "pulse")(keys=keys, args=args)
            except SHARD_ERRORS as e:
                shards.failed(shard, e)
                continue
            received = time.monotonic()
            shard.succeeded()
            for peer, value in zip(peers, reply[1:], strict=True):
                if value:
                    at, _, text = value.partition("|")
                    seen = found.get(peer)
                    if seen is None or int(at) > seen.at_ms:
                        found[peer] = Pulse(peer, int(at), text)
            if reading is None:
                reading = PulseReading(int(reply[0]), sent, received, found)
        if reading is None:
            raise shards.unavailable("the pulse")
        shards.count(pulses=1)
        return reading
