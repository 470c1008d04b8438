"""Declarative field specs: one declaration gives a validator and a JSON Schema.

See :mod:`cronman.fieldspec.base` for the contract every field keeps.
"""

from __future__ import annotations

from cronman.fieldspec.base import (
    JOB_TIME_PATTERN,
    MISSING,
    REF,
    TIME_MAX,
    TIME_MIN,
    Field,
    Rule,
    Schema,
    any_case,
    components,
    type_name,
)
from cronman.fieldspec.containers import After, Custom, ListOf, MapOf, Obj, OneOf
from cronman.fieldspec.scalars import Bool, Choice, Const, Int, Num, Str, Time

__all__ = [
    "JOB_TIME_PATTERN", "MISSING", "REF", "TIME_MAX", "TIME_MIN", "After", "Bool", "Choice",
    "Const", "Custom", "Field", "Int", "ListOf", "MapOf", "Num", "Obj", "OneOf", "Rule",
    "Schema", "Str", "Time", "any_case", "components", "type_name",
]
