"""Names on the wire between cronman and the receivers of its callbacks (SPEC §3).

The http target sends these headers, the sqs target these message
attributes; :mod:`cronman.receiver` reads them. Light: standard library only.
"""

from __future__ import annotations

from typing import Final

HEADER_JOB_ID: Final = "Cronman-Job-Id"
HEADER_RUN_ID: Final = "Cronman-Run-Id"
HEADER_SCHEDULED_FOR: Final = "Cronman-Scheduled-For"
HEADER_ATTEMPT: Final = "Cronman-Attempt"
HEADER_SIGNATURE: Final = "Cronman-Signature"

ATTR_JOB_ID: Final = "cronman-job-id"
ATTR_RUN_ID: Final = "cronman-run-id"
ATTR_SCHEDULED_FOR: Final = "cronman-scheduled-for"
