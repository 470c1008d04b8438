"""What a scheduler node's own log says about it: when it was ready, and
which membership it saw when.

Used for what the receiver cannot tell: the moment each node finished its
initial load and took in the last ownership change since (the million
scenario's "all nodes loaded": a node that becomes ready before the others
joined first owns every job, then drops its share or loads what it gained)
and when the survivors noticed a killed node had gone (the kill scenario). Lines look like
``2024-05-01 21:33:00,123 INFO cronman.scheduler.node: scheduler node bench-1
ready: owns 667 of 1000 live jobs ...`` (the node's ``LOG_FORMAT``, local time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_READY = re.compile(r"scheduler node \S+ ready: owns (\d+) of (\d+) live jobs")
_MEMBERS = re.compile(r"membership changed: (.*)$")
_OWNERSHIP = re.compile(r"ownership(?: reconciled)?: \d+ (?:jobs gained|gained jobs loaded)")


def _stamp_ms(line: str) -> int | None:
    m = _STAMP.match(line)
    if m is None:
        return None
    # The node logs local time, as does this process's clock (same machine, same TZ).
    return int(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000)


@dataclass
class NodeLog:
    """Incremental reader of one node's log, from the node's start offset."""

    path: Path
    offset: int = 0
    ready_ms: int | None = None
    owned_at_ready: int | None = None
    jobs_at_ready: int | None = None
    memberships: list[tuple[int, list[str]]] = field(default_factory=list)
    last_ownership_ms: int | None = None  # last "ownership: ..." or "... reconciled" line
    _partial: bytes = b""

    def read(self) -> None:
        """Take in the lines written since the last call."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            self._line(raw.decode("utf-8", "replace"))

    def _line(self, line: str) -> None:
        ms = _stamp_ms(line)
        if ms is None:
            return
        if self.ready_ms is None and (m := _READY.search(line)):
            self.ready_ms = ms
            self.owned_at_ready, self.jobs_at_ready = int(m.group(1)), int(m.group(2))
        elif m := _MEMBERS.search(line):
            self.memberships.append((ms, [s.strip() for s in m.group(1).split(",")]))
        elif _OWNERSHIP.search(line):
            self.last_ownership_ms = ms

    @property
    def loaded_ms(self) -> int | None:
        """Ready, and done with the ownership changes logged so far (None before ready)."""
        if self.ready_ms is None:
            return None
        return max(self.ready_ms, self.last_ownership_ms or 0)

    def left_after(self, gone: str, since_ms: int) -> int | None:
        """When this node first saw a membership without ``gone`` after ``since_ms``."""
        return next((ms for ms, ids in self.memberships if ms >= since_ms and gone not in ids),
                    None)
