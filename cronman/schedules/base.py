"""The ``Schedule`` contract every kind of schedule keeps."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol


class Schedule(Protocol):
    """Fire times as a pure function of the schedule object."""

    kind: str

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire time strictly after ``t`` (aware UTC in and out); None if none."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The normalised JSON object."""
        ...
