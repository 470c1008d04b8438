"""validate_target: every field of every kind, defaults, and error fields."""

from __future__ import annotations

import pytest

from cronman.callbacks import validate_target
from cronman.callbacks.dead_letter import validate_dead_letter
from cronman.errors import ValidationError

HTTP = {"kind": "http", "url": "https://billing.example.com/digest"}
SQS = {
    "kind": "sqs",
    "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
    "region": "us-east-1",
    "body": "hello",
}
CONTAINER = {"kind": "container", "image": "busybox:1.36"}


def error_of(spec, **kwargs) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        validate_target(spec, **kwargs)
    return info.value


# -- shape and kind -------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, "http", ["http"], 3])
def test_target_must_be_an_object(spec):
    err = error_of(spec)
    assert err.field is None
    assert "object" in err.message
    assert err.prefixed("target").field == "target"


def test_kind_is_required_and_checked():
    assert error_of({"url": "https://x.example"}).field == "kind"
    err = error_of({"kind": "ftp"})
    assert err.field == "kind" and "http, sqs, container" in err.message
    assert error_of({"kind": 1}).field == "kind"


def test_allowed_kinds_restricts():
    err = error_of(CONTAINER, allowed_kinds=("http", "sqs"))
    assert err.field == "kind" and "container" not in err.message


@pytest.mark.parametrize("base", [HTTP, SQS, CONTAINER])
def test_unknown_keys_are_named(base):
    err = error_of({**base, "retries": 3})
    assert err.field == "retries"
    assert "retries" in err.message


# -- http -----------------------------------------------------------------------


def test_http_defaults():
    assert validate_target(HTTP) == {
        "kind": "http",
        "url": "https://billing.example.com/digest",
        "method": "POST",
        "headers": {},
        "body": "",
        "timeout": 10,
    }


def test_http_full_and_idempotent():
    spec = {
        "kind": "http",
        "url": "http://billing.internal:8080/digest?x=1",
        "method": "put",
        "headers": {"Content-Type": "application/json", "X-Token": "abc"},
        "body": '{"kind":"digest"}',
        "timeout": 2.5,
    }
    out = validate_target(spec)
    assert out["method"] == "PUT"
    assert out["headers"] == {"Content-Type": "application/json", "X-Token": "abc"}
    assert out["timeout"] == 2.5
    assert validate_target(out) == out


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_http_methods(method):
    assert validate_target({**HTTP, "method": method})["method"] == method


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "", 1, "CONNECT"])
def test_http_bad_methods(method):
    assert error_of({**HTTP, "method": method}).field == "method"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("ftp://example.com/x", "'ftp'"),
        ("file:///etc/passwd", "'file'"),
        ("gopher://example.com/", "'gopher'"),
        ("javascript:alert(1)", "'javascript'"),
        ("example.com/path", "absolute"),
        ("//example.com/path", "absolute"),
        ("http:///path", "host"),
        ("http://", "host"),
        ("http://user:pw@example.com/", "credentials"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com/\r\nX: y", "control"),
        ("http://example.com:99999/", "valid URL"),
        ("http://example.com:0/", "port 0"),
        ("http://[::1/", "valid URL"),
        ("http://2130706433/", "canonical IPv4"),
        ("http://0x7f.1/", "canonical IPv4"),
        ("http://127.1/", "canonical IPv4"),
        ("http://exa_mple..com!/", "host"),
        ("", "http or https"),
        (42, "http or https"),
        ("http://example.com/" + "a" * 2100, "2048"),
    ],
)
def test_http_bad_urls(url, needle):
    err = error_of({**HTTP, "url": url})
    assert err.field == "url"
    assert needle in err.message


def test_http_url_required():
    err = error_of({"kind": "http"})
    assert err.field == "url" and "required" in err.message


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com",
        "https://example.com:8443/a/b?c=d#frag",
        "http://127.0.0.1:8080/",
        "http://[::1]:8080/",
        "http://[2001:db8::1]/",
        "https://bücher.example/",
        "http://localhost/",
        "HTTPS://EXAMPLE.COM/",
    ],
)
def test_http_good_urls(url):
    # Private addresses pass validation: the guard applies when sending, per node settings.
    assert validate_target({**HTTP, "url": url})["url"] == url


@pytest.mark.parametrize(
    ("headers", "field", "needle"),
    [
        ({"X-A": "1\r\nX-B: 2"}, "headers.X-A", "CR"),
        ({"X-A": "1\n"}, "headers.X-A", "CR"),
        ({"X-A": "a\x00b"}, "headers.X-A", "NUL"),
        ({"X A": "1"}, "headers.X A", "header name"),
        ({"X-A\r\n": "1"}, "headers.X-A\r\n", "header name"),
        ({"": "1"}, "headers.", "header name"),
        ({"X-A": 1}, "headers.X-A", "string"),
        ({"X-A": None}, "headers.X-A", "string"),
        ({"Cronman-Run-Id": "x"}, "headers.Cronman-Run-Id", "Cronman-"),
        ({"cronman-signature": "x"}, "headers.cronman-signature", "Cronman-"),
        ({"Host": "internal"}, "headers.Host", "HTTP client"),
        ({"Content-Length": "5"}, "headers.Content-Length", "HTTP client"),
        ({"Transfer-Encoding": "chunked"}, "headers.Transfer-Encoding", "HTTP client"),
        ({"Connection": "close"}, "headers.Connection", "HTTP client"),
        ({"X-A": "1", "x-a": "2"}, "headers.x-a", "duplicate"),
        ({"X-Big": "v" * 9000}, "headers.X-Big", "bytes"),
    ],
)
def test_http_bad_headers(headers, field, needle):
    err = error_of({**HTTP, "headers": headers})
    assert err.field == field
    assert needle in err.message


def test_http_headers_must_be_an_object_and_bounded():
    assert error_of({**HTTP, "headers": ["X-A: 1"]}).field == "headers"
    too_many = {f"X-{i}": "v" for i in range(65)}
    assert error_of({**HTTP, "headers": too_many}).field == "headers"


def test_http_headers_null_means_none():
    assert validate_target({**HTTP, "headers": None})["headers"] == {}


def test_http_body_limit_counts_utf8_bytes():
    assert validate_target({**HTTP, "body": "a" * 65536})["body"] == "a" * 65536
    err = error_of({**HTTP, "body": "a" * 65537})
    assert err.field == "body" and "65536" in err.message
    # 3 bytes each in UTF-8: 21846 * 3 > 64 KiB although len() is small.
    assert error_of({**HTTP, "body": "€" * 21846}).field == "body"


@pytest.mark.parametrize("body", [1, {"a": 1}, ["x"], True])
def test_http_body_must_be_a_string(body):
    assert error_of({**HTTP, "body": body}).field == "body"


def test_http_body_lone_surrogate():
    err = error_of({**HTTP, "body": "\ud800"})
    assert err.field == "body" and "Unicode" in err.message


@pytest.mark.parametrize("timeout", [0, -1, 300.5, 301, float("nan"), float("inf"), True, "10", []])
def test_http_bad_timeouts(timeout):
    assert error_of({**HTTP, "timeout": timeout}).field == "timeout"


@pytest.mark.parametrize("timeout", [0.001, 1, 10, 299.9, 300])
def test_http_good_timeouts(timeout):
    assert validate_target({**HTTP, "timeout": timeout})["timeout"] == timeout


# -- sqs ------------------------------------------------------------------------


def test_sqs_defaults_and_idempotent():
    out = validate_target(SQS)
    assert out == {
        "kind": "sqs",
        "queue_url": SQS["queue_url"],
        "region": "us-east-1",
        "body": "hello",
        "attributes": {},
        "endpoint_url": None,
        "message_group_id": None,
    }
    assert validate_target(out) == out


def test_sqs_full():
    spec = {
        **SQS,
        "queue_url": "http://127.0.0.1:4566/000000000000/jobs.fifo",
        "attributes": {"team": "billing", "x.y-z_1": "v"},
        "endpoint_url": "http://127.0.0.1:4566",
        "message_group_id": "tenant-42",
    }
    out = validate_target(spec)
    assert out["attributes"] == {"team": "billing", "x.y-z_1": "v"}
    assert out["endpoint_url"] == "http://127.0.0.1:4566"
    assert out["message_group_id"] == "tenant-42"


@pytest.mark.parametrize("field", ["queue_url", "region", "body"])
def test_sqs_required(field):
    spec = dict(SQS)
    del spec[field]
    err = error_of(spec)
    assert err.field == field and "required" in err.message


@pytest.mark.parametrize(
    ("changes", "field", "needle"),
    [
        ({"queue_url": "sqs://q"}, "queue_url", "'sqs'"),
        ({"queue_url": "q"}, "queue_url", "absolute"),
        ({"region": ""}, "region", "region"),
        ({"region": "US EAST"}, "region", "region"),
        ({"region": 1}, "region", "region"),
        ({"body": ""}, "body", "empty"),
        ({"body": 5}, "body", "string"),
        ({"body": "a\x00b"}, "body", "U+0000"),
        ({"body": "a\x0bb"}, "body", "U+000B"),
        ({"body": "a" * (256 * 1024 + 1)}, "body", "256 KiB"),
        ({"endpoint_url": "localhost:4566"}, "endpoint_url", "only http and https"),
        ({"endpoint_url": 4566}, "endpoint_url", "http or https"),
        ({"message_group_id": ""}, "message_group_id", "1-128"),
        ({"message_group_id": "a" * 129}, "message_group_id", "1-128"),
        ({"message_group_id": "has space"}, "message_group_id", "1-128"),
        ({"message_group_id": 7}, "message_group_id", "1-128"),
        ({"attributes": ["a"]}, "attributes", "object"),
        ({"attributes": {"a": 1}}, "attributes.a", "string"),
        ({"attributes": {"a": ""}}, "attributes.a", "empty"),
        ({"attributes": {"a": "x\x01"}}, "attributes.a", "U+0001"),
        ({"attributes": {"bad name": "v"}}, "attributes.bad name", "letters"),
        ({"attributes": {".a": "v"}}, "attributes..a", "'.'"),
        ({"attributes": {"a.": "v"}}, "attributes.a.", "'.'"),
        ({"attributes": {"a..b": "v"}}, "attributes.a..b", "'.'"),
        ({"attributes": {"cronman-run-id": "v"}}, "attributes.cronman-run-id", "reserved"),
        ({"attributes": {"AWS.x": "v"}}, "attributes.AWS.x", "reserved"),
        ({"attributes": {"amazon.x": "v"}}, "attributes.amazon.x", "reserved"),
    ],
)
def test_sqs_bad_fields(changes, field, needle):
    err = error_of({**SQS, **changes})
    assert err.field == field
    assert needle in err.message


def test_sqs_attribute_count_leaves_room_for_cronmans_three():
    seven = {f"a{i}": "v" for i in range(7)}
    assert validate_target({**SQS, "attributes": seven})["attributes"] == seven
    err = error_of({**SQS, "attributes": {**seven, "a7": "v"}})
    assert err.field == "attributes" and "7" in err.message


def test_sqs_body_plus_attributes_must_fit():
    body = "a" * (256 * 1024 - 600)
    assert validate_target({**SQS, "body": body})["body"] == body
    err = error_of({**SQS, "body": body, "attributes": {"big": "v" * 200}})
    assert err.field == "body" and "attributes" in err.message


# -- container ------------------------------------------------------------------


def test_container_defaults_and_idempotent():
    out = validate_target(CONTAINER)
    assert out == {
        "kind": "container",
        "image": "busybox:1.36",
        "command": [],
        "env": {},
        "cpu": 1,
        "memory_mb": 256,
        "timeout": 3600,
        "selector": {},
        "network": "none",
        "user": None,
    }
    assert validate_target(out) == out


def test_container_full():
    spec = {
        **CONTAINER,
        "command": ["sh", "-c", "echo hi"],
        "env": {"A": "1", "_B2": ""},
        "cpu": 0.5,
        "memory_mb": 64,
        "timeout": 30,
        "selector": {"zone": "a", "disk": "ssd"},
        "network": "host",
        "user": "1000:1000",
    }
    out = validate_target(spec)
    assert out["selector"] == {"zone": "a", "disk": "ssd"}
    assert (out["network"], out["user"]) == ("host", "1000:1000")
    assert out["command"] == ["sh", "-c", "echo hi"]
    assert out["env"] == {"A": "1", "_B2": ""}
    assert (out["cpu"], out["memory_mb"], out["timeout"]) == (0.5, 64, 30)
    # JSON does not tell 64.0 from 64 (the OpenAPI "integer" takes both).
    again = validate_target({**spec, "memory_mb": 64.0})
    assert again["memory_mb"] == 64 and isinstance(again["memory_mb"], int)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"image": None}, "image"),
        ({"image": ""}, "image"),
        ({"image": "has space"}, "image"),
        ({"image": 3}, "image"),
        ({"command": "echo hi"}, "command"),
        ({"command": ["echo", 1]}, "command[1]"),
        ({"command": ["a\x00"]}, "command[0]"),
        ({"env": ["A=1"]}, "env"),
        ({"env": {"1A": "x"}}, "env.1A"),
        ({"env": {"A-B": "x"}}, "env.A-B"),
        ({"env": {"A": 1}}, "env.A"),
        ({"env": {"A": "x\x00"}}, "env.A"),
        ({"cpu": 0}, "cpu"),
        ({"cpu": -1}, "cpu"),
        ({"cpu": True}, "cpu"),
        ({"cpu": "1"}, "cpu"),
        ({"memory_mb": 0}, "memory_mb"),
        ({"memory_mb": 1.5}, "memory_mb"),
        ({"memory_mb": True}, "memory_mb"),
        ({"memory_mb": "256"}, "memory_mb"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": False}, "timeout"),
        ({"timeout": 8 * 86400}, "timeout"),
        ({"selector": ["zone=a"]}, "selector"),
        ({"selector": {"zone": 1}}, "selector.zone"),
        ({"selector": {"bad key": "x"}}, "selector.bad key"),
        ({"selector": {"zone": "a,b"}}, "selector.zone"),
        ({"network": "bridge"}, "network"),
        ({"network": 1}, "network"),
        ({"user": "alice"}, "user"),
        ({"user": 0}, "user"),
        ({"user": "1000:"}, "user"),
    ],
)
def test_container_bad_fields(changes, field):
    spec = {k: v for k, v in {**CONTAINER, **changes}.items() if v is not None or k != "image"}
    assert error_of(spec).field == field


# -- dead letter ----------------------------------------------------------------


def test_dead_letter_accepts_http_and_sqs_without_body():
    http = validate_dead_letter({"kind": "http", "url": "https://dlq.example/runs"})
    assert http["method"] == "POST" and http["body"] == ""
    sqs = validate_dead_letter({k: v for k, v in SQS.items() if k != "body"})
    assert sqs["body"] == ""


def test_dead_letter_refusals():
    with pytest.raises(ValidationError) as info:
        validate_dead_letter(CONTAINER)
    assert info.value.field == "kind"
    with pytest.raises(ValidationError) as info:
        validate_dead_letter({**HTTP, "body": "x"})
    assert info.value.field == "body" and "run record" in info.value.message
    with pytest.raises(ValidationError) as info:
        validate_dead_letter(SQS)
    assert info.value.field == "body"
    with pytest.raises(ValidationError) as info:
        validate_dead_letter({**HTTP, "method": "GET"})
    assert info.value.field == "method"
