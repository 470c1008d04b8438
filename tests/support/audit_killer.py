"""``cronman audit export`` that SIGKILLs itself in the middle of a batch's upload.

    python -m tests.support.audit_killer N [cronman audit export options...]

Runs the real exporter; once the N-th batch's manifest is created, the
process kills itself (SIGKILL: no cleanup, no flush) right after storing that
batch's first object -- a batch whose other objects are not written and
whose slot position is not confirmed. The test then restarts a plain
exporter, which must finish that batch with the same objects.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from cronman.audit import sinks

_state = {"batches": 0, "puts": 0}
_put = sinks.S3Sink.put
_put_if_absent = sinks.S3Sink.put_if_absent


def main() -> None:
    die_in_batch = int(sys.argv[1])

    def put_if_absent(self: Any, key: str, body: bytes) -> bool:
        created = _put_if_absent(self, key, body)
        if created and key.startswith("_manifests/"):
            _state["batches"] += 1
            _state["puts"] = 0
        return created

    def put(self: Any, key: str, body: bytes) -> None:
        _put(self, key, body)
        _state["puts"] += 1
        if _state["batches"] >= die_in_batch and _state["puts"] == 1:
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
