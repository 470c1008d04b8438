"""Callback signing, re-exported from :mod:`cronman.signing`.

The implementation lives in the light part of cronman so that receivers and
the server share it; this module keeps the server-side import path working.
"""

from __future__ import annotations

from cronman.signing import (
    DEFAULT_TOLERANCE,
    SIGNATURE_HEADER,
    Secret,
    Signer,
    sign,
    signature_hex,
    verify_signature,
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "SIGNATURE_HEADER",
    "Secret",
    "Signer",
    "sign",
    "signature_hex",
    "verify_signature",
]
