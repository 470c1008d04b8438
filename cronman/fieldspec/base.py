"""Declarative field specs: one declaration gives a validator and a JSON Schema.

A ``Field`` checks a value and returns it normalised (``check``), raising
``ValidationError`` whose ``field`` is the path *relative to the value*
(None: the value itself); a container puts its key in front on the way out.
The same object emits its JSON Schema fragment (``schema``), and a field with
a ``name`` is a component: used by ``$ref``, defined by ``components``.

Messages are parameters (``{type}``, ``{max}``, ``{value!r}``... placeholders),
so each declaration keeps the words the API answers. Checks JSON Schema
cannot state are ``Rule``s: code, plus whatever weaker fragment the schema
can carry. Standard library only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from cronman.errors import ValidationError

REF: Final = "#/components/schemas/"
MISSING: Final[Any] = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
# Times a job may hold: far from datetime's limits, so fire-time arithmetic
# cannot overflow, and 4-digit years. JOB_TIME_PATTERN says the same of years.
TIME_MIN: Final = datetime(1970, 1, 1, tzinfo=UTC)
TIME_MAX: Final = datetime(9000, 1, 1, tzinfo=UTC)
JOB_TIME_PATTERN: Final = "^(?:19[7-9][0-9]|[2-8][0-9]{3})-"

F = TypeVar("F", bound="Field")
Schema = dict[str, Any]


def _plain(value: Any) -> Any:
    """A default as JSON gives it back: a str enum member as the plain string
    (what is stored, compared and dumped must not depend on where it came from)."""
    return str.__str__(value) if isinstance(value, str) else value


def type_name(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class Rule:
    """A check beyond the type: ``test`` returns the error message, or None.

    ``schema`` is what JSON Schema can say of it (merged into the field's
    fragment; empty when it can say nothing: then it is a semantic rule).
    """

    test: Callable[[Any], str | None]
    schema: Mapping[str, Any] = field(default_factory=dict)


def _or_null(schema: Schema) -> Schema:
    if "$ref" in schema or "type" not in schema and "enum" not in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    if "enum" in schema:
        schema["enum"] = [*schema["enum"], None]
    else:
        kind = schema["type"]
        schema["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    return schema


class Field:
    """Base of every field: where it sits (required, nullable, default) and its rules.

    ``nullable``: null is accepted and means the default (None without one);
    otherwise null is checked as a value (and refused by the type).
    """

    handles_none = False  # True: check() gets None (missing or null) itself

    def __init__(self, *, required: bool = False, required_message: str = "is required",
                 nullable: bool = False, default: Any = MISSING,
                 description: str | None = None, name: str | None = None,
                 rules: Sequence[Rule] = (), extra: Mapping[str, Any] | None = None) -> None:
        self.required = required
        self.required_message = required_message
        self.nullable = nullable
        self.default = _plain(default)
        self.description = description
        self.name = name
        self.rules = tuple(rules)
        self.extra = dict(extra or {})

    def check(self, value: Any) -> Any:
        """``value`` normalised; ``ValidationError`` (field relative to it) if invalid."""
        raise NotImplementedError

    def body(self) -> Schema:
        """The type's own JSON Schema (no null, default or description)."""
        raise NotImplementedError

    def children(self) -> Iterable[Field]:
        return ()

    def but(self: F, **changes: Any) -> F:
        """A copy with other placement attributes (``nullable``, ``default``...)."""
        out = copy.copy(self)
        for key, value in changes.items():
            if not hasattr(out, key):
                raise AttributeError(key)
            setattr(out, key, _plain(value) if key == "default" else value)
        return out

    def join(self, key: str, sub: str | None) -> str:
        """The path of an error ``sub`` inside this field at ``key``."""
        return key if sub is None else f"{key}.{sub}"

    def _apply_rules(self, value: Any) -> None:
        for rule in self.rules:
            message = rule.test(value)
            if message is not None:
                raise ValidationError(message)

    def definition(self) -> Schema:
        """The full schema of the type: body, rules, extra, description."""
        out = self.body()
        for rule in self.rules:
            out.update(rule.schema)
        out.update(self.extra)
        if self.description:
            out["description"] = self.description
        return out

    def schema(self) -> Schema:
        """The fragment where the field is used: a ``$ref`` for a component."""
        out: Schema = {"$ref": REF + self.name} if self.name else self.definition()
        if self.nullable:
            out = _or_null(out)
        if isinstance(self.default, (str, int, float)):  # bools are ints
            out["default"] = self.default
        return out


def components(*roots: Field) -> dict[str, Schema]:
    """The definitions of the named fields in (and under) ``roots``."""
    out: dict[str, Schema] = {}

    def visit(f: Field) -> None:
        if f.name and f.name not in out:
            out[f.name] = f.definition()
        for child in f.children():
            visit(child)

    for root in roots:
        visit(root)
    return out


def any_case(word: str) -> str:
    """A regex matching ``word`` in any case (JSON Schema patterns have no flags)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else "\\" + c if c in ".-" else c
                   for c in word)
