"""sign / verify_signature (v2): the documented signed string, its binding to the
job, run, fire time, URL and body, freshness, rotation, malformed input; the
namespaces' keys and their overlap windows."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import pytest

from cronman.signing import Signer, context_tail, namespace_key, sign, verify_signature
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
