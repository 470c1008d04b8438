"""Breaks in the trail: ``_gaps/{from LSN}-{to LSN}.json`` in the export.

A logical slot lives on one database server. When the exporter has to make
its slot anew although batches were exported before (a failover promoted a
member that did not have the slot, or the slot was dropped), the changes
committed between the export's last position (``from_lsn``: the end of the
last batch) and the new slot's start (``to_lsn``) are not in the trail. The
record says so where the trail is read; ``to_lsn`` below ``from_lsn`` means
the server is behind what was exported (a failover lost commits the old
primary had). Recover what the range held from the database itself (the rows
as they are now) or a backup; keep the slot across failovers with a Patroni
permanent slot (the README's HA section).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from cronman.audit.batches import lsn_name
from cronman.audit.pgoutput import format_lsn, parse_lsn

GAP_DIR = "_gaps"


@dataclass(frozen=True)
class Gap:
    slot: str
    from_lsn: int
    to_lsn: int
    last_exported_commit_lsn: int
    exporter: str
    detected_at: str

    @property
    def key(self) -> str:
        return f"{GAP_DIR}/{lsn_name(self.from_lsn)}-{lsn_name(self.to_lsn)}.json"

    def describe(self) -> str:
        if self.to_lsn < self.from_lsn:
            what = (f"the database is behind the export: changes exported up to "
                    f"{format_lsn(self.from_lsn)} are not on this server, which starts the "
                    f"new slot at {format_lsn(self.to_lsn)}")
        else:
            what = (f"changes committed between {format_lsn(self.from_lsn)} and "
                    f"{format_lsn(self.to_lsn)} are not in the export")
        return (f"slot {self.slot} was made anew where batches had been exported (a failover "
                f"to a member without it, or it was dropped): {what}; recorded as {self.key}")

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = asdict(self)
        for name in ("from_lsn", "to_lsn", "last_exported_commit_lsn"):
            doc[name] = format_lsn(getattr(self, name))
        doc["what"] = self.describe()
        return (json.dumps(doc, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Gap:
        doc = json.loads(data)
        doc.pop("what", None)
        for name in ("from_lsn", "to_lsn", "last_exported_commit_lsn"):
            doc[name] = parse_lsn(doc[name])
        return cls(**doc)
