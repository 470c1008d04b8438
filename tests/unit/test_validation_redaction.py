"""Redaction of target secrets in answers, and restoring them on write-back."""

from __future__ import annotations

import pytest

from cronman.errors import ValidationError
from cronman.redaction import destination, redact_target, redact_value, restore_redacted


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


def test_destination_is_scheme_host_and_port():
    def http(url):
        return destination({"kind": "http", "url": url})

    assert http("https://a.example.com/x") == http("https://A.example.com:443/y?z")
    assert http("http://a.example.com/") == http("http://a.example.com:80")
    assert http("https://a.example.com/") != http("http://a.example.com/")
    assert http("https://a.example.com/") != http("https://a.example.com:8443/")
    assert http("https://a.example.com/") != http("https://b.example.com/")
    sqs = {"kind": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q",
           "region": "eu-west-1", "endpoint_url": None}
    assert destination(sqs) != destination({**sqs, "endpoint_url": "http://127.0.0.1:9/"})
    box = {"kind": "container", "image": "busybox", "command": ["true"]}
    assert destination(box) != destination({**box, "command": ["env"]})
    assert destination(box) != destination({**box, "image": "alpine"})


def test_redacted_values_refused_when_the_destination_moved():
    stored = {"kind": "http", "url": "https://a.example.com/hook",
              "headers": {"Authorization": "Bearer abcdefghijkl", "Content-Type": "text/plain"}}
    sent = {"kind": "http", "url": "https://evil.example.net/hook",
            "headers": {"Authorization": "Bear…", "Content-Type": "text/plain"}}
    with pytest.raises(ValidationError) as caught:
        restore_redacted(sent, stored, "dead_letter")
    assert caught.value.field == "dead_letter.headers.Authorization"
    # Public headers are shown in full, so sending them back is no restore.
    sent["headers"] = {"Authorization": "Bearer fresh-value", "Content-Type": "text/plain"}
    assert restore_redacted(sent, stored) == sent


def test_a_webhook_s_destination_is_its_url_and_an_unknown_kind_keeps_nothing():
    hook = {"kind": "webhook", "url": "https://a.example.com/x",
            "headers": {"Authorization": "Bearer abcdefghijkl"}}
    sent = {**hook, "headers": {"Authorization": "Bear…"}}
    assert restore_redacted(sent, hook)["headers"] == hook["headers"]
    with pytest.raises(ValidationError) as caught:
        restore_redacted({**sent, "url": "https://b.example.com/x"}, hook, "channel")
    assert caught.value.field == "channel.headers.Authorization"
    # A kind without a destination case (one added later, say) fails closed:
    # its redacted values are never restored, even where nothing changed.
    future = {**hook, "kind": "pager"}
    assert destination(future) is None
    with pytest.raises(ValidationError):
        restore_redacted({**sent, "kind": "pager"}, future)
    for kind in ("http", "webhook", "sqs", "container"):
        assert destination({"kind": kind}) is not None, kind
