"""Redaction of target secrets in answers, and restoring them on write-back."""

from __future__ import annotations

from cronman.api.serialize import redact_target, redact_value, restore_redacted


def test_redact_value():
    assert redact_value("Bearer s3cr3t-token-value") == "Bear…"
    assert redact_value("short") == "***"
    assert redact_value("12345678") == "***"
    assert redact_value("123456789") == "1234…"
    assert redact_value("") == "***"


def test_redact_target_masks_headers_and_env_only():
    target = {"kind": "http", "url": "https://a.example.com/x", "method": "POST",
              "headers": {"Authorization": "Bearer abcdefghijkl", "X-Key": "k"},
              "body": "{}", "timeout": 10}
    out = redact_target(target)
    assert out["headers"] == {"Authorization": "Bear…", "X-Key": "***"}
    assert {k: out[k] for k in ("url", "method", "body", "timeout")} == \
        {k: target[k] for k in ("url", "method", "body", "timeout")}
    assert target["headers"]["Authorization"] == "Bearer abcdefghijkl"  # not mutated
    container = {"kind": "container", "image": "busybox", "env": {"PASSWORD": "hunter22hunter"}}
    assert redact_target(container)["env"] == {"PASSWORD": "hunt…"}
    assert redact_target(None) is None
    for value in redact_target(target)["headers"].values():
        assert value not in target["headers"].values()


def test_restore_redacted_keeps_stored_secrets():
    stored = {"kind": "http", "url": "https://a.example.com",
              "headers": {"Authorization": "Bearer abcdefghijkl", "X-Key": "k1",
                          "X-Other": "long-enough-value"}}
    sent = {"kind": "http", "url": "https://a.example.com",
            "headers": {"authorization": "Bear…",       # redacted, name case differs
                        "X-Key": "***",                  # redacted short value
                        "X-Other": "a-new-value-here",   # changed on purpose
                        "X-New": "***"}}                 # new header, taken as sent
    out = restore_redacted(sent, stored)
    assert out["headers"] == {"authorization": "Bearer abcdefghijkl", "X-Key": "k1",
                              "X-Other": "a-new-value-here", "X-New": "***"}
    # Nothing to restore from: unchanged.
    assert restore_redacted(sent, None) == sent
    assert restore_redacted("junk", stored) == "junk"
    env_stored = {"kind": "container", "image": "i", "env": {"TOKEN": "0123456789abc"}}
    env_sent = {"kind": "container", "image": "i", "env": {"TOKEN": "0123…"}}
    assert restore_redacted(env_sent, env_stored)["env"] == {"TOKEN": "0123456789abc"}
