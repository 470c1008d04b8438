"""The labels apply writes on the jobs it manages, and the definition digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

MANAGED_LABEL = "cronman.io/managed-by"
MANAGED_VALUE = "apply"
DIGEST_LABEL = "cronman.io/applied-digest"
RESERVED_LABELS = (MANAGED_LABEL, DIGEST_LABEL)
DIGEST_CHARS = 32


def definition_digest(spec: Mapping[str, Any]) -> str:
    """A digest of a definition (key order and formatting do not matter)."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def managed_filter() -> str:
    """The ``label=`` filter of the jobs apply manages."""
    return f"{MANAGED_LABEL}:{MANAGED_VALUE}"


def is_managed(labels: Mapping[str, str] | None) -> bool:
    return (labels or {}).get(MANAGED_LABEL) == MANAGED_VALUE
