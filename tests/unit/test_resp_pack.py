"""Commands in the Redis protocol: hiredis's encoder and the fallback agree."""

from __future__ import annotations

from cronman.coordination.resp import _pack, pack


def test_the_c_encoder_writes_what_the_protocol_says() -> None:
    args = ("EVALSHA", "ab" * 20, 2, "k:1", "k:ü", b"raw\r\n", 120000, -5, 1.5, "")
    assert pack(args) == _pack(args)
    assert pack(("GET", "k")) == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"


def test_values_the_c_encoder_refuses_are_written_as_their_text() -> None:
    assert pack(("SET", "k", None)) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nNone\r\n"
