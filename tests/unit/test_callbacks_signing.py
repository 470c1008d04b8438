"""sign / verify_signature (v2): the documented signed string, its binding to the
job, run, fire time, URL and body, freshness, rotation, malformed input; the
namespaces' keys and their overlap windows."""

from __future__ import annotations

import hashlib
import hmac
import textwrap
import time
from datetime import UTC, datetime

import pytest

from cronman.callbacks.httpclient import PreparedRequest
from cronman.signing import (
    Signer,
    canonical_url,
    context_tail,
    namespace_key,
    sign,
    verify_signature,
)
from cronman.signing_keys import KeyState, NamespaceSigners, namespace_keys

BODY = b'{"kind":"digest"}'
T = 1_795_000_000
CTX = {"job_id": "job-1", "run_id": "run-1", "scheduled_for": "2026-11-22T07:00:00Z",
       "url": "https://billing.example.com/hook"}


def signed(key="s3cret", body=BODY, t=T, **ctx):
    return sign(key, t, body=body, **{**CTX, **ctx})


def ok(key, header, body=BODY, now=T, **ctx):
    return verify_signature(key, header, body, now=now, **{**CTX, **ctx})


def test_format_is_t_and_v2_hex_hmac_of_the_documented_string():
    string = "\n".join(["v2", str(T), "job-1", "run-1", "2026-11-22T07:00:00Z",
                        "https://billing.example.com/hook", hashlib.sha256(BODY).hexdigest()])
    expected = hmac.new(b"s3cret", string.encode(), hashlib.sha256).hexdigest()
    assert signed() == f"t={T},v2={expected}"


def test_round_trip():
    assert ok("s3cret", signed())
    assert ok(b"s3cret", signed(), now=T + 299)
    assert ok("k", signed("k", body=b""), body=b"")


@pytest.mark.parametrize("change", [
    {"job_id": "job-2"}, {"run_id": "run-2"}, {"scheduled_for": "2026-11-22T07:00:01Z"},
    {"url": "https://other.example.com/hook"}, {"url": "https://billing.example.com/hook?x"},
])
def test_every_part_of_the_context_is_signed(change):
    assert not ok("s3cret", signed(), **change)


@pytest.mark.parametrize(("key", "body", "now"), [
    ("other", BODY, T),  # wrong key
    ("s3cret", BODY + b" ", T),  # tampered body
    ("s3cret", BODY, T + 301),  # stale
    ("s3cret", BODY, T - 301),  # from the future
])
def test_rejections(key, body, now):
    assert not ok(key, signed(), body=body, now=now)


def test_a_v1_signature_is_refused():
    v1 = hmac.new(b"s3cret", b"%d." % T + BODY, hashlib.sha256).hexdigest()
    assert not ok("s3cret", f"t={T},v1={v1}")


def test_tolerance_can_be_changed_or_disabled():
    header = signed("k")
    assert not verify_signature("k", header, BODY, now=T + 61, tolerance=60, **CTX)
    assert verify_signature("k", header, BODY, now=T + 10**6, tolerance=None, **CTX)


def test_timestamp_is_part_of_the_signature():
    assert not ok("k", signed("k").replace(f"t={T}", f"t={T + 1}"))


def test_rotation_several_v2_values_and_receivers_holding_several_keys():
    header = signed(["new", "old"])
    assert header.count("v2=") == 2
    assert ok("old", header) and ok("new", header) and not ok("gone", header)
    assert ok(["next", "current"], signed("current"))


def test_uppercase_hex_and_spaces_are_accepted():
    t_part, v_part = signed("k").split(",")
    assert ok("k", f"{t_part}, v2={v_part[3:].upper()}")


@pytest.mark.parametrize("header", [
    None, "", "garbage", f"t={T}", "v2=abc", f"t=abc,v2={'0' * 64}",
    f"t={T},t={T},v2={'0' * 64}", f"t=-{T},v2={'0' * 64}", f"t={T},v2=é", f"t={T},v2=",
])
def test_malformed_headers_are_false_not_errors(header):
    assert ok("k", header) is False


def test_signer_matches_sign():
    tail = context_tail(CTX["url"], BODY)
    assert Signer(["a", "b"]).sign(T, "job-1", "run-1", CTX["scheduled_for"], tail) \
        == signed(["a", "b"])


def test_namespace_keys_differ_by_namespace_generation_and_secret():
    keys = {namespace_key("s", "a"), namespace_key("s", "b"), namespace_key("s", "a", 1),
            namespace_key("t", "a")}
    assert len(keys) == 4
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in keys)
    # "a" + generation 1 must not collide with namespace "1\na" or similar.
    assert namespace_key("s", "a", 1) != namespace_key("s", "1\na", 0)


def test_namespace_signers_sign_with_the_namespace_key_and_overlap_then_retire():
    until = datetime.fromtimestamp(T + 100, UTC)
    signers = NamespaceSigners("cluster", [KeyState("b", 3, until)])
    tail = context_tail(CTX["url"], BODY)
    a = signers.signer("a", T)
    assert a is not None
    header_a = a.sign(T, "job-1", "run-1", CTX["scheduled_for"], tail)
    assert ok(namespace_key("cluster", "a"), header_a)
    assert not ok(namespace_key("cluster", "b", 3), header_a)
    assert not ok("cluster", header_a)  # the cluster secret itself never signs
    b = signers.signer("b", T)
    assert b is not None
    during = b.sign(T, "job-1", "run-1", CTX["scheduled_for"], tail)
    assert ok(namespace_key("cluster", "b", 3), during)
    assert ok(namespace_key("cluster", "b", 2), during)
    after_signer = signers.signer("b", T + 101)
    assert after_signer is not None
    after = after_signer.sign(T + 101, "job-1", "run-1", CTX["scheduled_for"], tail)
    assert ok(namespace_key("cluster", "b", 3), after, now=T + 101)
    assert not ok(namespace_key("cluster", "b", 2), after, now=T + 101)
    assert [k.generation for k in namespace_keys("cluster", KeyState("b", 3, until), T)] \
        == [3, 2]
    assert NamespaceSigners(None).signer("a", T) is None


def test_namespace_signers_follow_updates():
    signers = NamespaceSigners("cluster")
    tail = context_tail(CTX["url"], BODY)
    first = signers.signer("a", T)
    assert first is not None
    signers.update([KeyState("a", 1, None)])
    second = signers.signer("a", T)
    assert second is not None
    header = second.sign(T, "job-1", "run-1", CTX["scheduled_for"], tail)
    assert ok(namespace_key("cluster", "a", 1), header)
    assert not ok(namespace_key("cluster", "a", 0), header)


# -- the URL's canonical form ------------------------------------------------------

SPELLINGS = [
    ("http://127.0.0.1:9000", "http://127.0.0.1:9000/"),
    ("HTTP://LocalHost:9000/hook", "http://localhost:9000/hook"),
    ("http://h.example:80/hook", "http://h.example/hook"),
    ("https://h.example:443/hook", "https://h.example/hook"),
    ("https://h.example:80/hook", "https://h.example:80/hook"),
    ("http://h.example:09000/hook", "http://h.example:9000/hook"),
    ("http://h.example/hook#frag", "http://h.example/hook"),
    ("http://h.example/hook?", "http://h.example/hook"),
    ("http://h.example/caf\u00e9?q=\u00e9&r", "http://h.example/caf%C3%A9?q=%C3%A9&r"),
    ("http://h.example/a%2Fb?x=%41&y=?", "http://h.example/a%2Fb?x=%41&y=?"),
    ("http://h.example/a\"b<c>", "http://h.example/a%22b%3Cc%3E"),
    ("http://[::1]:9000/hook", "http://[::1]:9000/hook"),
    ("http://b\u00fccher.example/hook", "http://xn--bcher-kva.example/hook"),
]


@pytest.mark.parametrize(("given", "canonical"), SPELLINGS)
def test_canonical_url(given, canonical):
    assert canonical_url(given) == canonical
    assert canonical_url(canonical) == canonical  # idempotent: the wire form is its own


@pytest.mark.parametrize(("given", "_canonical"), SPELLINGS)
def test_the_canonical_url_is_what_the_http_client_puts_on_the_wire(given, _canonical):
    wire = PreparedRequest("POST", given).render()
    request_line, host_line = wire.split(b"\r\n")[:2]
    target = request_line.split(b" ")[1].decode("ascii")
    assert host_line.startswith(b"Host: ")
    scheme = given.split(":", 1)[0].lower()
    assert f"{scheme}://{host_line[6:].decode('ascii')}{target}" == canonical_url(given)


@pytest.mark.parametrize(("given", "canonical"), SPELLINGS)
def test_a_signature_holds_for_every_spelling_of_the_url_the_client_sends(given, canonical):
    assert ok("k", signed("k", url=given), url=canonical)
    assert ok("k", signed("k", url=canonical), url=given)
    assert not ok("k", signed("k", url=given), url=canonical + "x")


@pytest.mark.parametrize("url", ["ftp://h.example/", "http:///hook", "http://h.example:99999/",
                                 "hook", "http://[::1/"])
def test_a_url_that_cannot_be_sent_has_no_canonical_form(url):
    with pytest.raises(ValueError):
        canonical_url(url)


def test_the_by_hand_verifier_of_the_docstring_agrees(monkeypatch):
    import cronman.signing as signing

    code = signing.__doc__.split("Without it (the same steps by hand)::", 1)[1]
    code = code.split("\n\n", 1)[1].split("\nFailure notifications", 1)[0]
    scope: dict = {}
    exec(textwrap.dedent(code), scope)  # noqa: S102 - our own documentation
    for given, canonical in SPELLINGS:
        assert scope["canonical"](given) == canonical
    now = int(time.time())
    header = sign("k", now, body=BODY, **{**CTX, "url": "https://Billing.example.com:443/hook"})
    hdrs = {"Cronman-Signature": header, "Cronman-Job-Id": CTX["job_id"],
            "Cronman-Run-Id": CTX["run_id"], "Cronman-Scheduled-For": CTX["scheduled_for"]}
    assert scope["verify"]("k", CTX["url"], hdrs, BODY)
    assert not scope["verify"]("k", "https://billing.example.com/other", hdrs, BODY)


def test_set_state_replaces_one_namespace_and_keeps_the_others_signers():
    signers = NamespaceSigners("cluster")
    a, b = signers.signer("a", T), signers.signer("b", T)
    signers.set_state(KeyState("a"))  # unchanged: the signer is kept
    assert signers.signer("a", T) is a
    signers.set_state(KeyState("a", 1, datetime.fromtimestamp(T + 100, UTC)))
    fresh = signers.signer("a", T)
    assert fresh is not a and signers.signer("b", T) is b
    assert fresh is not None
    header = fresh.sign(T, "job-1", "run-1", CTX["scheduled_for"], context_tail(CTX["url"], BODY))
    assert ok(namespace_key("cluster", "a", 1), header) and ok(namespace_key("cluster", "a"), header)
