"""Declarative jobs: make the jobs of the API match a set of definitions.

``make_plan`` compares the definitions (from files) with the live jobs of
their namespaces and says what to create, update and (with prune) delete;
``execute`` carries a plan out through the API client, each update
conditional on the version that was compared. Jobs are matched by
namespace + name. Jobs written by apply carry two labels:

- ``cronman.io/managed-by: apply`` -- only such jobs are ever pruned, so
  jobs made by hand (or by another tool) are left alone;
- ``cronman.io/applied-digest``: a digest of the definition as last applied.
  The API shows secrets (target headers, container env) only redacted, so a
  rotated secret cannot be seen by comparing with the live job; a changed
  digest shows that the definition changed.

A job counts as unchanged when its digest label matches and its live
definition equals the file's once both are normalised the way the API
normalises (defaults filled in, secrets redacted): a change made by hand
through the API is seen and undone, as with ``kubectl apply`` -- except
``paused`` when the definition does not name it (an operator's pause stays),
and an interval's anchor when the definition gives none (the phase stays).
"""

from __future__ import annotations

from cronman.apply.execute import Outcome, Result, execute
from cronman.apply.labels import DIGEST_LABEL, MANAGED_LABEL, MANAGED_VALUE
from cronman.apply.plan import Change, Plan, PlanError, make_plan

__all__ = [
    "DIGEST_LABEL",
    "MANAGED_LABEL",
    "MANAGED_VALUE",
    "Change",
    "Outcome",
    "Plan",
    "PlanError",
    "Result",
    "execute",
    "make_plan",
]
