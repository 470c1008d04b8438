"""API tokens: stored as sha256 hashes, the secret is shown once.

``any_tokens`` and ``find_token`` run on every API request, so both answers
are cached for ``CACHE_SECONDS`` per Store. A token made or revoked through
the same Store takes effect at once; through another process (``cronman
tokens`` while the API runs) within ``CACHE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Row

from cronman.store.engine import Database
from cronman.store.tables import api_tokens
from cronman.timeutil import utcnow

TOKEN_PREFIX = "cm_"
CACHE_SECONDS = 1.5
_CACHE_MAX = 1024


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _record(row: Row[Any]) -> dict[str, Any]:
    m = row._mapping
    namespaces = m["namespaces"]
    return {
        "id": m["id"],
        "name": m["name"],
        "namespaces": None if namespaces is None else list(namespaces),
        "admin": namespaces is None,
        "created_at": m["created_at"],
        "revoked_at": m["revoked_at"],
    }


_PUBLIC = (api_tokens.c.id, api_tokens.c.name, api_tokens.c.namespaces,
           api_tokens.c.created_at, api_tokens.c.revoked_at)


class SqlTokenStore:
    """TokenStore: create, look up by secret, list, revoke."""

    def __init__(self, db: Database, clock: Any = time.monotonic) -> None:
        self._db = db
        self._clock = clock
        self._lock = threading.Lock()
        self._any: tuple[float, bool] | None = None
        self._found: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def _forget(self) -> None:
        with self._lock:
            self._any = None
            self._found.clear()

    def create_token(self, name: str,
                     namespaces: Sequence[str] | None) -> tuple[str, dict[str, Any]]:
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = {
            "id": str(uuid.uuid4()),
            "name": name,
            "token_hash": hash_secret(secret),
            "namespaces": None if namespaces is None else sorted(set(namespaces)),
            "created_at": utcnow(),
            "revoked_at": None,
        }
        self._db.write(lambda tx: tx.conn.execute(insert(api_tokens), row))
        self._forget()
        record = {k: row[k] for k in ("id", "name", "namespaces", "created_at", "revoked_at")}
        record["admin"] = namespaces is None
        return secret, record

    def find_token(self, secret: str) -> dict[str, Any] | None:
        """The live (not revoked) token with this secret, or None."""
        if not secret:
            return None
        digest = hash_secret(secret)
        now = self._clock()
        with self._lock:
            hit = self._found.get(digest)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        stmt = select(*_PUBLIC).where(api_tokens.c.token_hash == digest,
                                      api_tokens.c.revoked_at.is_(None))
        with self._db.read() as conn:
            row = conn.execute(stmt).first()
        record = None if row is None else _record(row)
        with self._lock:
            if len(self._found) >= _CACHE_MAX:
                self._found.clear()
            self._found[digest] = (now, record)
        return record

    def any_tokens(self) -> bool:
        """Whether any live token exists (then the API requires one)."""
        now = self._clock()
        with self._lock:
            cached = self._any
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        stmt = select(api_tokens.c.id).where(api_tokens.c.revoked_at.is_(None)).limit(1)
        with self._db.read() as conn:
            answer = conn.execute(stmt).first() is not None
        with self._lock:
            self._any = (now, answer)
        return answer

    def list_tokens(self) -> list[dict[str, Any]]:
        """Every token, revoked ones included, oldest first (never the hash)."""
        stmt = select(*_PUBLIC).order_by(api_tokens.c.created_at, api_tokens.c.id)
        with self._db.read() as conn:
            return [_record(r) for r in conn.execute(stmt)]

    def revoke_token(self, token_id: str) -> bool:
        stmt = (update(api_tokens)
                .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
                .values(revoked_at=utcnow()))
        done = self._db.write(lambda tx: tx.conn.execute(stmt).rowcount) > 0
        self._forget()
        return done
