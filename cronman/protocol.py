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
# An http target with "completion": "callback": where its receiver reports,
# and the lease it reports under (the worker calls' ``lease_token``).
HEADER_COMPLETION_URL: Final = "Cronman-Completion-Url"
HEADER_HEARTBEAT_URL: Final = "Cronman-Heartbeat-Url"
HEADER_LEASE_TOKEN: Final = "Cronman-Lease-Token"

ATTR_JOB_ID: Final = "cronman-job-id"
ATTR_RUN_ID: Final = "cronman-run-id"
ATTR_SCHEDULED_FOR: Final = "cronman-scheduled-for"
