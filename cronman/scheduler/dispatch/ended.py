"""The runs this node ended lately, and when (``EndedRuns``).

The lease sweeper takes expired runs in the database, then reads their
outcome marks from the coordinator before it carries them on; a node cut off
from the coordinator waits there for seconds. A run of this node's own that
it took (its lease had lapsed while renewals were slow) may end here in the
meantime -- its next attempt sent, its outcome on its way to the database --
and must not be sent again under the same attempt number. The sweeper asks
whether a run it took ended here since it took it.
"""

from __future__ import annotations

import time
from collections import OrderedDict

# Remembered this long (monotonic seconds), and at most this many (a node at
# 1,000 fires/s holds 60,000, a few MB): more than
# a sweep that waited out a coordinator's timeouts takes.
KEEP_S = 60.0
KEEP_MAX = 100_000


class EndedRuns:
    """Run id -> the monotonic time this node stopped holding it."""

    def __init__(self, keep_s: float = KEEP_S, keep_max: int = KEEP_MAX) -> None:
        self._ended: OrderedDict[str, float] = OrderedDict()
        self._keep_s = keep_s
        self._keep_max = keep_max

    def add(self, run_id: str, at: float | None = None) -> None:
        now = time.monotonic() if at is None else at
        ended = self._ended
        ended[run_id] = now
        ended.move_to_end(run_id)
        while ended and (len(ended) > self._keep_max
                         or next(iter(ended.values())) < now - self._keep_s):
            ended.popitem(last=False)

    def since(self, run_id: str, at: float) -> bool:
        """Whether this node stopped holding ``run_id`` at or after ``at``."""
        ended = self._ended.get(run_id)
        return ended is not None and ended >= at
