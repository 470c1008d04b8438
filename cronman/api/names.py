"""What names, namespaces, labels and ids look like in the API: the bounds
and patterns that validation and the OpenAPI document both read."""

from __future__ import annotations

import re

NAME_MAX = 256
NAMESPACE_MAX = 128
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
LABEL_KEY_MAX = 128
LABEL_VALUE_MAX = 256
LABELS_MAX = 64
# A job, run or token id as a path parameter (a UUID; looser here, exact at lookup).
ID_PATTERN = r"[0-9a-fA-F-]{1,36}"
ID_RE = re.compile(f"^{ID_PATTERN}$")
