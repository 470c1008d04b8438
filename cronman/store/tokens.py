"""API tokens: stored as sha256 hashes, the secret is shown once.

``any_token_created`` and ``find_token`` run on every API request, so both
answers are cached for ``CACHE_SECONDS`` per Store. A token made or revoked
through the same Store takes effect at once; through another process
(``cronman tokens`` while the API runs) within ``CACHE_SECONDS``.

Tokens are revoked, never deleted: once one has been created the API
requires a token for good, revoking every token does not open it again.
``any_token_created`` answers True for ever once it has seen a token.

Every creation and revocation writes a ``token_history`` row in the
transaction of the change: who (``TokenActor``: an admin token through the
API, or someone with database access), when, through which request, and
the token's scope. The audit export carries that table; no secret or hash
is ever in it.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.engine import Row

from cronman.models import Page
from cronman.store.codec import decode_search_cursor, encode_search_cursor
from cronman.store.engine import Database, Tx
from cronman.store.records import TokenActor
from cronman.store.tables import api_tokens, token_history
from cronman.timeutil import utcnow
from cronman.vocabulary import TokenAction

TOKEN_PREFIX = "cm_"
CACHE_SECONDS = 1.5
_CACHE_MAX = 1024


DATABASE = TokenActor()


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _record(row: Row[*tuple[Any, ...]]) -> dict[str, Any]:
    m = row._mapping
    namespaces = m["namespaces"]
    return {
        "id": m["id"],
        "name": m["name"],
        "namespaces": None if namespaces is None else list(namespaces),
        "admin": namespaces is None,
        "read_only": bool(m["read_only"]),
        "created_at": m["created_at"],
        "revoked_at": m["revoked_at"],
    }


_PUBLIC = (api_tokens.c.id, api_tokens.c.name, api_tokens.c.namespaces,
           api_tokens.c.read_only, api_tokens.c.created_at, api_tokens.c.revoked_at)


def _record_change(tx: Tx, action: TokenAction, token: dict[str, Any], actor: TokenActor,
                   at: Any) -> None:
    tx.conn.execute(insert(token_history), {
        "token_id": token["id"],
        "token_name": token["name"],
        "action": action.value,
        "namespaces": token["namespaces"],
        "read_only": bool(token["read_only"]),
        "actor_token_id": actor.token_id,
        "actor_name": actor.name[:128],
        "request_id": actor.request_id,
        "at": at,
    })


class SqlTokenStore:
    """TokenStore: create, look up by secret, list, revoke; each change recorded."""

    def __init__(self, db: Database, clock: Any = time.monotonic) -> None:
        self._db = db
        self._clock = clock
        self._lock = threading.Lock()
        self._any: tuple[float, bool] | None = None
        self._found: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def _forget(self) -> None:
        with self._lock:
            if self._any is not None and not self._any[1]:
                self._any = None  # "a token exists" is never forgotten
            self._found.clear()

    def create_token(self, name: str, namespaces: Sequence[str] | None, *,
                     read_only: bool = False,
                     actor: TokenActor = DATABASE) -> tuple[str, dict[str, Any]]:
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = {
            "id": str(uuid.uuid4()),
            "name": name,
            "token_hash": hash_secret(secret),
            "namespaces": None if namespaces is None else sorted(set(namespaces)),
            "read_only": bool(read_only),
            "created_at": utcnow(),
            "revoked_at": None,
        }

        def write(tx: Tx) -> None:
            tx.conn.execute(insert(api_tokens), row)
            _record_change(tx, TokenAction.CREATE, row, actor, row["created_at"])

        self._db.write(write)
        self._forget()
        record: dict[str, Any] = {k: row[k] for k in ("id", "name", "namespaces", "read_only",
                                                       "created_at", "revoked_at")}
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

    def any_token_created(self) -> bool:
        """Whether a token was ever created, revoked ones included (then the
        API requires one)."""
        now = self._clock()
        with self._lock:
            cached = self._any
        if cached is not None and (cached[1] or now - cached[0] < CACHE_SECONDS):
            return cached[1]
        stmt = select(api_tokens.c.id).limit(1)
        with self._db.read() as conn:
            answer = conn.execute(stmt).first() is not None
        with self._lock:
            self._any = (now, answer)
        return answer

    def get_token(self, token_id: str) -> dict[str, Any] | None:
        """The token with this id, revoked or not (never its hash); None when unknown."""
        stmt = select(*_PUBLIC).where(api_tokens.c.id == token_id)
        with self._db.read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else _record(row)

    def list_tokens(self) -> list[dict[str, Any]]:
        """Every token, revoked ones included, oldest first (never the hash)."""
        stmt = select(*_PUBLIC).order_by(api_tokens.c.created_at, api_tokens.c.id)
        with self._db.read() as conn:
            return [_record(r) for r in conn.execute(stmt)]

    def list_token_page(self, limit: int, cursor: str | None = None) -> Page:
        """One page of ``list_tokens`` (oldest first); the cursor is the last
        token's position: its created_at (Unix microseconds), a dot, its id."""
        stmt = select(*_PUBLIC)
        if cursor:
            created, token_id = decode_search_cursor(cursor)
            stmt = stmt.where(or_(api_tokens.c.created_at > created,
                                  and_(api_tokens.c.created_at == created,
                                       api_tokens.c.id > token_id)))
        stmt = stmt.order_by(api_tokens.c.created_at, api_tokens.c.id).limit(limit + 1)
        with self._db.read() as conn:
            items = [_record(r) for r in conn.execute(stmt)]
        more = len(items) > limit
        items = items[:limit]
        last = items[-1] if more and items else None
        return Page(items, None if last is None
                    else encode_search_cursor(last["created_at"], last["id"]))

    def revoke_token(self, token_id: str, *, actor: TokenActor = DATABASE) -> bool:
        """Revoke a live token; False when there is none with this id (unknown or
        revoked already: nothing is recorded then)."""
        now = utcnow()

        def write(tx: Tx) -> bool:
            stmt = (update(api_tokens)
                    .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
                    .values(revoked_at=now))
            if tx.conn.execute(stmt).rowcount == 0:
                return False
            row = tx.conn.execute(select(*_PUBLIC).where(api_tokens.c.id == token_id)).one()
            _record_change(tx, TokenAction.REVOKE, _record(row), actor, now)
            return True

        done = self._db.write(write)
        self._forget()
        return done

    def token_history(self, token_id: str) -> list[dict[str, Any]]:
        """The recorded changes of a token, oldest first."""
        stmt = (select(token_history).where(token_history.c.token_id == token_id)
                .order_by(token_history.c.id))
        with self._db.read() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]
