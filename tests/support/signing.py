"""Checking the signatures cronman sent, as a namespace's receiver would."""

from __future__ import annotations

from cronman.receiver import InvalidCallback, verify_callback
from cronman.signing import namespace_key, verify_signature
from tests.support.receiver import ReceivedRequest


def callback_verifies(cluster_secret: str, namespace: str, req: ReceivedRequest, url: str,
                      *, generation: int = 0) -> bool:
    """Whether ``req`` passes the receiver helper holding ``namespace``'s key, at ``url``."""
    key = namespace_key(cluster_secret, namespace, generation)
    try:
        verify_callback(key, req.headers, req.body, url=url)
    except InvalidCallback:
        return False
    return True


def notification_verifies(cluster_secret: str, namespace: str, req: ReceivedRequest,
                          url: str) -> bool:
    """Whether a webhook notification's signature holds under ``namespace``'s key."""
    return verify_signature(namespace_key(cluster_secret, namespace),
                            req.header("Cronman-Signature"), req.body,
                            job_id=req.header("Cronman-Job-Id") or "",
                            run_id=req.header("Cronman-Notification-Id") or "",
                            scheduled_for="", url=url)
