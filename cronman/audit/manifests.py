"""Batch manifests: the range a batch covers, fixed before its objects are written.

``_manifests/{first commit LSN}.json`` names the batch's first and last
transactions (commit LSNs), the end LSN the slot is advanced to once every
object is stored, and the objects' keys. It is created only if absent
(S3 ``If-None-Match: *``, a hard link locally) before any object of the
batch: an exporter that restarts -- or takes over -- finds the manifest of the
first transaction it reads and cuts its batch exactly there, so the objects
it writes are the same ones, never a second copy of some rows under other
names. Manifests are small; keep them at least as long as a PostgreSQL crash
could move the slot back (its confirmed position is saved at checkpoints):
a lifecycle rule expiring ``_manifests/`` after a week is plenty.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from cronman.audit.batches import lsn_name
from cronman.audit.pgoutput import format_lsn, parse_lsn

MANIFEST_DIR = "_manifests"


def manifest_key(first_commit_lsn: int) -> str:
    return f"{MANIFEST_DIR}/{lsn_name(first_commit_lsn)}.json"


@dataclass(frozen=True)
class Manifest:
    first_commit_lsn: int
    last_commit_lsn: int
    end_lsn: int
    transactions: int
    changes: int
    objects: tuple[str, ...]
    exporter: str
    created_at: str

    def to_bytes(self) -> bytes:
        doc = asdict(self)
        for name in ("first_commit_lsn", "last_commit_lsn", "end_lsn"):
            doc[name] = format_lsn(doc[name])
        doc["objects"] = list(self.objects)
        return (json.dumps(doc, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        doc = json.loads(data)
        for name in ("first_commit_lsn", "last_commit_lsn", "end_lsn"):
            doc[name] = parse_lsn(doc[name])
        doc["objects"] = tuple(doc["objects"])
        return cls(**doc)
