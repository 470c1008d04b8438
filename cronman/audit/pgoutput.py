"""A decoder of PostgreSQL's ``pgoutput`` logical replication messages (protocol 1).

The message formats are PostgreSQL's "Logical Replication Message Formats"
(Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate,
Message); values arrive in their text form. Pure: bytes in, transactions out.

Each transaction comes out whole at its Commit: its commit LSN (the position
of the commit record: the order of transactions), its end LSN (the position
after it: what a slot is confirmed to once the transaction is stored), its
commit time, and its row changes in the order they were made. A column whose
value is TOASTed and was not changed by an UPDATE arrives without its value:
it is ``UNCHANGED`` here, and the exporter lists such columns by name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

PG_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)


class Unchanged:
    """The value of a TOASTed column an UPDATE did not change (not sent)."""

    _instance: Unchanged | None = None

    def __new__(cls) -> Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = Unchanged()
Value = str | None | Unchanged

INSERT = "insert"
UPDATE = "update"
DELETE = "delete"
TRUNCATE = "truncate"

_I8 = struct.Struct("!b")
_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_I64 = struct.Struct("!q")
_BEGIN = struct.Struct("!qqI")          # final LSN, commit time (µs since 2000), xid
_COMMIT = struct.Struct("!bqqq")        # flags, commit LSN, end LSN, commit time


class DecodeError(ValueError):
    """A message this decoder does not understand (or one out of order)."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    is_key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str
    name: str
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Change:
    """One row change: its relation, what happened, and the row's values
    (the new row for insert and update, the old key or row for delete; none
    for truncate)."""

    relation: Relation
    op: str
    values: tuple[Value, ...]


@dataclass(slots=True)
class Transaction:
    xid: int
    commit_lsn: int
    end_lsn: int = 0
    commit_time: datetime = PG_EPOCH
    changes: list[Change] = field(default_factory=list)


def pg_time(micros: int) -> datetime:
    return PG_EPOCH + timedelta(microseconds=micros)


def format_lsn(lsn: int) -> str:
    """PostgreSQL's text form of an LSN (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, sep, low = text.partition("/")
    if not sep:
        raise ValueError(f"not an LSN: {text!r}")
    return int(high, 16) << 32 | int(low, 16)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple[int, ...]:
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        value = self.data[self.pos:end].decode()
        self.pos = end + 1
        return value

    def tuple_data(self) -> tuple[Value, ...]:
        (count,) = self.take(_I16)
        values: list[Value] = []
        data = self.data
        for _ in range(count):
            kind = data[self.pos]
            self.pos += 1
            if kind == 0x74:  # 't': text
                (length,) = _I32.unpack_from(data, self.pos)
                start = self.pos + 4
                self.pos = start + length
                values.append(data[start:self.pos].decode())
            elif kind == 0x6E:  # 'n': null
                values.append(None)
            elif kind == 0x75:  # 'u': unchanged TOASTed value
                values.append(UNCHANGED)
            else:
                raise DecodeError(f"tuple column kind {chr(kind)!r} (binary mode is not used)")
        return tuple(values)


class PgOutputDecoder:
    """Feed the messages of one decoding session in order; ``feed`` returns
    each transaction when its Commit arrives. Relations are remembered for
    the session (pgoutput sends each one before its first change)."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self._txn: Transaction | None = None

    def feed(self, data: bytes) -> Transaction | None:
        r = _Reader(data)
        kind = r.byte()
        if kind == "B":
            final_lsn, micros, xid = r.take(_BEGIN)
            if self._txn is not None:
                raise DecodeError("Begin inside a transaction")
            self._txn = Transaction(xid=xid, commit_lsn=final_lsn, commit_time=pg_time(micros))
            return None
        if kind == "C":
            _, commit_lsn, end_lsn, micros = r.take(_COMMIT)
            txn = self._require_txn("Commit")
            if commit_lsn != txn.commit_lsn:
                raise DecodeError(f"Commit at {format_lsn(commit_lsn)} for a transaction "
                                  f"announced at {format_lsn(txn.commit_lsn)}")
            txn.end_lsn = end_lsn
            txn.commit_time = pg_time(micros)
            self._txn = None
            return txn
        if kind == "R":
            (oid,) = r.take(_U32)
            namespace, name = r.string(), r.string()
            r.take(_I8)  # replica identity setting
            (count,) = r.take(_I16)
            columns = []
            for _ in range(count):
                (flags,) = r.take(_I8)
                col_name = r.string()
                (type_oid,) = r.take(_U32)
                r.take(_I32)  # type modifier
                columns.append(Column(col_name, type_oid, bool(flags & 1)))
            self.relations[oid] = Relation(oid, namespace, name, tuple(columns))
            return None
        if kind in "IUD":
            (oid,) = r.take(_U32)
            relation = self._relation(oid)
            marker = r.byte()
            if kind == "U" and marker in "KO":  # the old key / row: the new row follows
                r.tuple_data()
                marker = r.byte()
            if (kind == "D") != (marker in "KO") or (kind != "D" and marker != "N"):
                raise DecodeError(f"{kind} message with tuple marker {marker!r}")
            op = {"I": INSERT, "U": UPDATE, "D": DELETE}[kind]
            self._require_txn(op).changes.append(Change(relation, op, r.tuple_data()))
            return None
        if kind == "T":
            (count,) = r.take(_I32)
            r.take(_I8)  # options (CASCADE, RESTART IDENTITY)
            txn = self._require_txn("truncate")
            for _ in range(count):
                (oid,) = r.take(_U32)
                txn.changes.append(Change(self._relation(oid), TRUNCATE, ()))
            return None
        if kind in "OYM":  # origin, type, logical message: nothing to keep
            return None
        raise DecodeError(f"unknown pgoutput message {kind!r}")

    def _require_txn(self, what: str) -> Transaction:
        if self._txn is None:
            raise DecodeError(f"{what} outside a transaction")
        return self._txn

    def _relation(self, oid: int) -> Relation:
        relation = self.relations.get(oid)
        if relation is None:
            raise DecodeError(f"change of relation {oid} before its Relation message")
        return relation
