"""sign / verify_signature: the documented format, freshness, rotation, malformed input."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from cronman.signing import Signer, sign, verify_signature

BODY = b'{"kind":"digest"}'
T = 1_795_000_000


def test_format_is_t_and_hex_hmac_of_t_dot_body():
    expected = hmac.new(b"s3cret", b"%d." % T + BODY, hashlib.sha256).hexdigest()
    assert sign("s3cret", BODY, T) == f"t={T},v1={expected}"


def test_round_trip():
    header = sign("s3cret", BODY, T)
    assert verify_signature("s3cret", header, BODY, now=T)
    assert verify_signature(b"s3cret", header, BODY, now=T + 299)


def test_empty_body():
    assert verify_signature("k", sign("k", b"", T), b"", now=T)


@pytest.mark.parametrize(
    ("secret", "body", "now"),
    [
        ("other", BODY, T),  # wrong secret
        ("s3cret", BODY + b" ", T),  # tampered body
        ("s3cret", BODY, T + 301),  # stale
        ("s3cret", BODY, T - 301),  # from the future
    ],
)
def test_rejections(secret, body, now):
    assert not verify_signature(secret, sign("s3cret", BODY, T), body, now=now)


def test_tolerance_can_be_changed_or_disabled():
    header = sign("k", BODY, T)
    assert not verify_signature("k", header, BODY, now=T + 61, tolerance=60)
    assert verify_signature("k", header, BODY, now=T + 10**6, tolerance=None)


def test_timestamp_is_part_of_the_signature():
    header = sign("k", BODY, T)
    forged = header.replace(f"t={T}", f"t={T + 1}")
    assert not verify_signature("k", forged, BODY, now=T)


def test_rotation_several_v1_values():
    header = sign(["new", "old"], BODY, T)
    assert header.count("v1=") == 2
    assert verify_signature("old", header, BODY, now=T)
    assert verify_signature("new", header, BODY, now=T)
    assert not verify_signature("gone", header, BODY, now=T)


def test_receiver_holding_several_secrets():
    assert verify_signature(["next", "current"], sign("current", BODY, T), BODY, now=T)


def test_uppercase_hex_and_spaces_are_accepted():
    t_part, v_part = sign("k", BODY, T).split(",")
    header = f"{t_part}, v1={v_part[3:].upper()}"
    assert verify_signature("k", header, BODY, now=T)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"t={T}",
        "v1=abc",
        f"t=abc,v1={'0' * 64}",
        f"t={T},t={T},v1={'0' * 64}",
        f"t=-{T},v1={'0' * 64}",
        f"t={T},v1=é",
        f"t={T},v1=",
    ],
)
def test_malformed_headers_are_false_not_errors(header):
    assert verify_signature("k", header, BODY, now=T) is False


def test_signer_matches_sign():
    assert Signer("k")(BODY, T) == sign("k", BODY, T)
    assert Signer(["a", "b"])(b"", T) == sign(["a", "b"], b"", T)
