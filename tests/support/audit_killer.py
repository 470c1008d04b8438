"""``cronman audit export`` that SIGKILLs itself in the middle of a batch's upload.

    python -m tests.support.audit_killer N [cronman audit export options...]

Runs the real exporter; once it has created the manifests of N batches of
more than one object each, the process kills itself (SIGKILL: no cleanup, no
flush) right after storing the N-th one's first object -- by construction a
batch whose other objects are not written and whose slot position is not
confirmed (a batch of one object would be whole by then, so those are not
counted). The test then restarts a plain exporter, which must finish that
batch with the same objects.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from cronman.audit import sinks
from cronman.audit.manifests import MANIFEST_DIR, Manifest

_state = {"torn_batches": 0, "armed": False}
_put = sinks.S3Sink.put
_put_if_absent = sinks.S3Sink.put_if_absent


def main() -> None:
    die_in_batch = int(sys.argv[1])

    def put_if_absent(self: Any, key: str, body: bytes) -> bool:
        created = _put_if_absent(self, key, body)
        if created and key.startswith(f"{MANIFEST_DIR}/"):
            # A batch of one object is whole once that is stored: not one to cut.
            if len(Manifest.from_bytes(body).objects) > 1:
                _state["torn_batches"] += 1
                _state["armed"] = _state["torn_batches"] >= die_in_batch
        return created

    def put(self: Any, key: str, body: bytes) -> None:
        _put(self, key, body)
        if _state["armed"]:  # the batch's first object: the others are not stored
            sys.stderr.write(f"audit_killer: SIGKILL after {key}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    sinks.S3Sink.put = put  # type: ignore[method-assign]
    sinks.S3Sink.put_if_absent = put_if_absent  # type: ignore[method-assign]
    from cronman.cli import main as cronman_main

    sys.argv = ["cronman", "audit", "export", *sys.argv[2:]]
    cronman_main()


if __name__ == "__main__":
    main()
