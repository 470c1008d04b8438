"""Callback signing, re-exported from :mod:`cronman.signing` and :mod:`cronman.signing_keys`.

The implementation lives in the light part of cronman so that receivers and
the server share it; this module keeps the server-side import path working.
"""

from __future__ import annotations

from cronman.signing import (
    DEFAULT_TOLERANCE,
    SIGNATURE_HEADER,
    Secret,
    Signer,
    context_tail,
    namespace_key,
    sign,
    signed_string,
    verify_signature,
)
from cronman.signing_keys import KeyState, NamespaceSigners

__all__ = [
    "DEFAULT_TOLERANCE",
    "SIGNATURE_HEADER",
    "KeyState",
    "NamespaceSigners",
    "Secret",
    "Signer",
    "context_tail",
    "namespace_key",
    "sign",
    "signed_string",
    "verify_signature",
]
