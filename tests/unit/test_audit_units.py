"""The audit export's pure parts: the pgoutput decoder, batch objects, manifests,
the local sink's create-if-absent, settings."""

from __future__ import annotations

import io
import struct
from datetime import UTC, datetime

import pyarrow.parquet as pq
import pytest

from cronman.audit.batches import batch_objects, object_key
from cronman.audit.columns import INT4, JSONB, TEXT, TIMESTAMPTZ
from cronman.audit.manifests import Manifest, manifest_key
from cronman.audit.pgoutput import (
    UNCHANGED,
    DecodeError,
    PgOutputDecoder,
    format_lsn,
    parse_lsn,
)
from cronman.audit.settings import AuditSettings
from cronman.audit.sinks import LocalSink, S3Sink, SinkError, open_sink

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _micros(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000) - PG_EPOCH_US


def begin(lsn: int, t: datetime, xid: int) -> bytes:
    return b"B" + struct.pack("!qqI", lsn, _micros(t), xid)


def commit(lsn: int, end: int, t: datetime) -> bytes:
    return b"C" + struct.pack("!bqqq", 0, lsn, end, _micros(t))


def relation(oid: int, name: str, cols: list[tuple[str, int, bool]]) -> bytes:
    out = b"R" + struct.pack("!I", oid) + _s("public") + _s(name) + struct.pack("!bh", 100,
                                                                             len(cols))
    for col, type_oid, key in cols:
        out += struct.pack("!b", 1 if key else 0) + _s(col) + struct.pack("!Ii", type_oid, -1)
    return out


def tuple_data(values: list[str | None | object]) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            raw = str(v).encode()
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


T1 = datetime(2026, 11, 24, 10, 59, 59, 500000, tzinfo=UTC)
T2 = datetime(2026, 11, 24, 11, 0, 0, 250000, tzinfo=UTC)
RUN_COLS = [("id", TEXT, True), ("attempt", INT4, False), ("scheduled_for", TIMESTAMPTZ, True),
            ("result", JSONB, False)]
JOB_COLS = [("id", TEXT, True), ("target", JSONB, False)]


def messages() -> list[bytes]:
    return [
        begin(0x100, T1, 7),
        relation(11, "scheduled_jobs", RUN_COLS),
        b"I" + struct.pack("!I", 11) + b"N" + tuple_data(["r1", "0", "2026-11-24 10:00:00+00",
                                                          None]),
        relation(12, "jobs", JOB_COLS),
        b"I" + struct.pack("!I", 12) + b"N" + tuple_data(
            ["j1", '{"kind":"http","headers":{"Authorization":"Bearer 0123456789"}}']),
        commit(0x100, 0x180, T1),
        begin(0x200, T2, 8),
        b"U" + struct.pack("!I", 11) + b"K" + tuple_data(["r1", None, "2026-11-24 10:00:00+00",
                                                          None])
        + b"N" + tuple_data(["r1", "1", "2026-11-24 10:00:00+00", UNCHANGED]),
        b"D" + struct.pack("!I", 12) + b"K" + tuple_data(["j1", None]),
        commit(0x200, 0x280, T2),
    ]


def decode_all() -> list:
    decoder = PgOutputDecoder()
    return [t for t in (decoder.feed(m) for m in messages()) if t is not None]


def test_decoder_gives_whole_transactions_in_order():
    first, second = decode_all()
    assert (first.xid, first.commit_lsn, first.end_lsn, first.commit_time) == (7, 0x100, 0x180,
                                                                              T1)
    assert [(c.relation.name, c.op) for c in first.changes] == [("scheduled_jobs", "insert"),
                                                                 ("jobs", "insert")]
    assert [(c.relation.name, c.op) for c in second.changes] == [("scheduled_jobs", "update"),
                                                                  ("jobs", "delete")]
    assert second.changes[0].values[3] is UNCHANGED
    assert second.changes[0].values[1] == "1"


def test_decoder_refuses_what_it_cannot_place():
    with pytest.raises(DecodeError):
        PgOutputDecoder().feed(commit(1, 2, T1))
    decoder = PgOutputDecoder()
    decoder.feed(begin(1, T1, 1))
    with pytest.raises(DecodeError, match="before its Relation"):
        decoder.feed(b"I" + struct.pack("!I", 99) + b"N" + tuple_data(["x"]))
    with pytest.raises(DecodeError, match="unknown"):
        decoder.feed(b"Z")


def test_lsn_text_round_trip():
    for lsn in (0, 0x16B374D848, 0xFFFFFFFF_FFFFFFFF):
        assert parse_lsn(format_lsn(lsn)) == lsn
    assert format_lsn(0x16B374D848) == "16/B374D848"


def test_batch_objects_are_per_table_and_hour_and_deterministic():
    txns = decode_all()
    objects = batch_objects(txns, ("jobs", "scheduled_jobs", "job_history"))
    assert [o.key for o in objects] == [
        object_key("jobs", ("2026-11-24", 10), 0x100, 0x200),
        object_key("jobs", ("2026-11-24", 11), 0x100, 0x200),
        object_key("scheduled_jobs", ("2026-11-24", 10), 0x100, 0x200),
        object_key("scheduled_jobs", ("2026-11-24", 11), 0x100, 0x200),
    ]
    assert objects[0].key == ("jobs/dt=2026-11-24/hour=10/"
                              "0000000000000100-0000000000000200.parquet")
    again = batch_objects(decode_all(), ("jobs", "scheduled_jobs", "job_history"))
    assert [o.body for o in again] == [o.body for o in objects]  # byte for byte
    runs = pq.read_table(io.BytesIO(objects[3].body)).to_pylist()
    assert runs == [{"cdc_commit_lsn": 0x200, "cdc_seq": 0, "cdc_commit_time": T2,
                     "cdc_xid": 8, "cdc_op": "update", "cdc_unchanged": ["result"],
                     "id": "r1", "attempt": 1,
                     "scheduled_for": datetime(2026, 11, 24, 10, tzinfo=UTC),
                     "result": None}]
    (job,) = pq.read_table(io.BytesIO(objects[0].body)).to_pylist()
    assert "0123456789" not in job["target"] and "Bear…" in job["target"]


def test_manifest_round_trip():
    m = Manifest(0x100, 0x200, 0x280, 2, 4, ("a", "b"), "x", "2026-11-24T11:00:00Z")
    assert Manifest.from_bytes(m.to_bytes()) == m
    assert manifest_key(0x100) == "_manifests/0000000000000100.json"


def test_local_sink_writes_whole_objects_and_creates_only_once(tmp_path):
    sink = LocalSink(tmp_path)
    assert sink.put_if_absent("_manifests/a.json", b"first")
    assert not sink.put_if_absent("_manifests/a.json", b"second")
    assert sink.get("_manifests/a.json") == b"first"
    sink.put("t/dt=2026-11-24/hour=01/x.parquet", b"1")
    sink.put("t/dt=2026-11-24/hour=01/x.parquet", b"2")
    assert sink.get("t/dt=2026-11-24/hour=01/x.parquet") == b"2"
    assert list(sink.keys()) == ["_manifests/a.json", "t/dt=2026-11-24/hour=01/x.parquet"]
    assert sink.get("nothing") is None and not sink.exists("nothing")
    with pytest.raises(SinkError):
        sink.put("../outside", b"x")


def test_urls_and_settings(tmp_path):
    assert isinstance(open_sink(str(tmp_path)), LocalSink)
    assert isinstance(open_sink(f"file://{tmp_path}"), LocalSink)
    s3 = open_sink("s3://bucket/some/prefix", s3_endpoint_url="http://127.0.0.1:1")
    assert isinstance(s3, S3Sink) and s3.prefix == "some/prefix/"
    with pytest.raises(ValueError):
        open_sink("ftp://x/y")
    settings = AuditSettings.from_env({"flush_seconds": 2.0},
                                      environ={"CRONMAN_AUDIT_SLOT_WARN_BYTES": "5",
                                               "CRONMAN_AUDIT_FLUSH_SECONDS": "9"})
    assert settings.slot_warn_bytes == 5 and settings.flush_seconds == 2.0
    for bad in ({"CRONMAN_AUDIT_SLOT": "Bad-Name"}, {"CRONMAN_AUDIT_FLUSH_SECONDS": "0"},
                {"CRONMAN_AUDIT_BATCH_CHANGES": "many"}):
        with pytest.raises(ValueError, match="CRONMAN_AUDIT_"):
            AuditSettings.from_env(environ=bad)
