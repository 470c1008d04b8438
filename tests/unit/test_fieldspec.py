"""The job definition is declared once (cronman.fieldspec): every declared field
is in /openapi.json, and the validator and the JSON Schema agree on generated
input (schema-valid input is accepted unless it broke a listed semantic rule;
where the schema states everything, the reverse holds too)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from cronman.api.job_fields import JOB, MISFIRE, RETRY
from cronman.api.openapi.document import openapi_document
from cronman.api.validation import validate_job
from cronman.callbacks.dead_letter import validate_dead_letter
from cronman.callbacks.target_fields import DEAD_LETTER, TARGET
from cronman.callbacks.validation import validate_target
from cronman.errors import ValidationError
from cronman.fieldspec import Field, Obj, components

DOC = openapi_document()
SCHEMAS = DOC["components"]["schemas"]
RULES = DOC["x-semantic-rules"]


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                 "components": DOC["components"]})


def test_every_declared_field_is_in_the_document():
    declared: dict[str, Field] = {"JobCreate": JOB, **{
        name: f for name, f in ((f.name, f) for f in _named(JOB, TARGET, DEAD_LETTER)) if name}}
    for name, f in declared.items():
        assert name in SCHEMAS, name
        if isinstance(f, Obj):
            assert set(SCHEMAS[name]["properties"]) == set(f.fields), name
            assert set(SCHEMAS[name].get("required", ())) == set(f.required_keys), name
    for name, definition in components(RETRY, MISFIRE, TARGET, DEAD_LETTER).items():
        assert SCHEMAS[name] == definition, name


def _named(*roots: Field) -> list[Field]:
    out: list[Field] = []

    def visit(f: Field) -> None:
        out.append(f)
        for child in f.children():
            visit(child)

    for root in roots:
        visit(root)
    return out


def _semantic(error: ValidationError, prefix: str) -> bool:
    """The refusal names a rule of x-semantic-rules (a field of it, or an entry in it)."""
    path = error.prefixed(prefix).field or ""
    for rule in RULES:
        field = rule["field"]
        if rule["message"] not in error.message:
            continue
        if (field == "" or path == field or path.endswith("." + field)
                or path.startswith(field + ".") or f".{field}." in path):
            return True
    return False


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(-1e6, 1e9),
                 st.text(max_size=8), st.just([]), st.just({}), st.just(["x"]),
                 st.just({"A": "b"}))
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12)
NAME = st.sampled_from(["X-A", "Content-Type", "team", "A_1", "zone", "tier"])
BAD_NAME = st.sampled_from(["x-a", "Host", "cronman-x", "bad name", "", "AWS.x", "a..b", ".a",
                            "1A", "a=b"])


def _map(names: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(names, st.sampled_from(["v", "1", "a b"]), max_size=3)


# Per key: plausible values (mostly valid), and wrong ones of the right type.
GOOD: dict[str, Any] = {
    "url": st.sampled_from(["https://hooks.example.com/x", "http://10.0.0.1:8080/p?q=1",
                            "https://a_b.example/"]),
    "method": st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
    "headers": _map(NAME), "attributes": _map(NAME), "env": _map(st.sampled_from(["A", "B_1"])),
    "selector": _map(NAME), "body": TEXT,
    "timeout": st.one_of(st.floats(0, 400), st.integers(0, 400)),
    "cpu": st.one_of(st.floats(0, 300), st.integers(0, 300)),
    "memory_mb": st.one_of(st.integers(0, 2 * 1024 * 1024), st.just(512.0)),
    "region": st.sampled_from(["us-east-1", "eu-west-1"]),
    "message_group_id": st.sampled_from(["g1", "a/b"]),
    "image": st.sampled_from(["alpine:3.20", "ghcr.io/a/b@sha256:00"]),
    "command": st.lists(TEXT, max_size=3),
    "network": st.sampled_from(["none", "host"]),
    "user": st.sampled_from(["root", "nobody", "1000", "1000:1000"]),
    "max_attempts": st.one_of(st.integers(0, 120), st.just(3.0)),
    "min_backoff": st.one_of(st.floats(-1, 10**5), st.integers(0, 10**5)),
    "max_backoff": st.one_of(st.floats(-1, 10**5), st.integers(0, 10**5)),
    "policy": st.sampled_from(["fire_once", "fire_all", "skip"]),
    "grace": st.one_of(st.floats(-1, 10**6), st.integers(0, 10**6)),
    "queue": st.sampled_from(["spark", "a.b-c_1"]),
    "payload": st.one_of(st.none(), st.dictionaries(NAME, TEXT, max_size=3), TEXT),
    "heartbeat_timeout": st.one_of(st.integers(0, 4000), st.just(60.0)),
    "capacity": st.one_of(st.none(), st.fixed_dictionaries(
        {"idle_workers": st.integers(0, 1001)}, optional={"wait": st.integers(0, 90000)})),
    "completion": st.sampled_from(["response", "callback"]),
    "completion_timeout": st.one_of(st.integers(0, 700_000), st.just(3600.0)),
}
GOOD["queue_url"] = GOOD["endpoint_url"] = GOOD["url"]
BAD: dict[str, Any] = {
    "url": st.sampled_from(["ftp://x/", "https://u:p@h/", "http://[::1]/", "https://0x7f.1/",
                            "https://h:0/", "x", "https://a..b/"]),
    "method": st.sampled_from(["post", "TRACE"]),
    "headers": _map(BAD_NAME), "attributes": _map(BAD_NAME), "env": _map(BAD_NAME),
    "selector": _map(BAD_NAME), "body": st.sampled_from(["", "a\ufffe", "x" * 70000]),
    "region": st.sampled_from(["US", "-x", ""]),
    "message_group_id": st.sampled_from(["a b", "", "x" * 129]),
    "image": st.sampled_from(["a b", "", "x" * 513]),
    "command": st.just(["a", 1]),
    "network": st.just("bridge"),
    "user": st.sampled_from(["bob", ""]),
    "policy": st.just("later"),
    "queue": st.sampled_from(["a b", "", "x" * 65]),
    "payload": st.just({"x": "y" * 70000}),
    "capacity": st.just({"wait": 3}),
    "completion": st.sampled_from(["later", ""]),
}
BAD["queue_url"] = BAD["endpoint_url"] = BAD["url"]


def _objects(obj: Obj) -> st.SearchStrategy[dict[str, Any]]:
    """Mostly plausible values (so that a good share is valid), some junk, rarely an unknown key."""
    const = obj.fields.get("kind")
    fixed = {"kind": st.just(const.value)} if const is not None else {}  # type: ignore[attr-defined]
    value = {k: _mostly(GOOD[k], st.one_of(BAD.get(k, JUNK), JUNK))
             for k in obj.fields if k != "kind"}
    fixed.update({k: value.pop(k) for k in obj.required_keys if k in value})
    objects = st.fixed_dictionaries(fixed, optional=value)
    return _mostly(objects, objects.map(lambda d: {**d, "unknown": 1}))


def _mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` about nine times in ten (one_of would pick either as often)."""
    return st.integers(0, 99).flatmap(lambda n: rare if n >= 90 else usual)


def _accepts(check: Any, value: dict[str, Any]) -> ValidationError | None:
    try:
        check(value)
    except ValidationError as exc:
        return exc
    return None


CASES = [
    *[(v.name, v, validate_target, "target") for v in TARGET.variants],
    *[(v.name, v, validate_dead_letter, "dead_letter") for v in DEAD_LETTER.variants],
    ("Retry", RETRY, RETRY.check, "retry"), ("Misfire", MISFIRE, MISFIRE.check, "misfire"),
]
# Where the schema states every rule the validator makes (no URL forms, no
# case-folded methods, no byte lengths), acceptance is the same both ways.
EXACT = {"ContainerTarget", "Misfire"}


@pytest.mark.parametrize(("name", "obj", "check", "prefix"), CASES, ids=[c[0] for c in CASES])
def test_validator_and_schema_agree(name: str, obj: Obj, check: Any, prefix: str) -> None:
    schema = _validator(name)

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(_objects(obj))
    def agree(value: dict[str, Any]) -> None:
        error = _accepts(check, value)
        if schema.is_valid(value):
            assert error is None or _semantic(error, prefix), (value, error and error.field, error)
        elif name in EXACT:
            assert error is not None, (value, list(schema.iter_errors(value))[:1])

    agree()


def test_spelled_out_whitespace_is_pythons():
    """The URL check and the schema patterns spell out str.isspace; it must stay exact."""
    import re
    import sys

    from cronman.callbacks.urls import PY_WHITESPACE

    spaces = re.compile(f"[{PY_WHITESPACE}]")
    assert all(bool(spaces.match(chr(i))) == chr(i).isspace()
               for i in range(sys.maxunicode + 1))


def _values(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        for value in obj.values():
            yield from _values(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _values(value)
    else:
        yield obj


def test_a_validated_job_holds_plain_strings_not_enum_members():
    """Defaults come from the vocabulary's str enums; what validation gives
    back is stored, compared and dumped (YAML in ``jobs apply``) as plain JSON."""
    out = validate_job({"name": "x", "schedule": {"kind": "interval", "every": 5},
                        "target": {"kind": "http", "url": "https://example.com/h"}},
                       job_id="00000000-0000-0000-0000-000000000001", now=datetime.now(UTC))
    strings = [v for v in _values(out) if isinstance(v, str)]
    assert strings and all(type(v) is str for v in strings), [
        repr(v) for v in strings if type(v) is not str]
