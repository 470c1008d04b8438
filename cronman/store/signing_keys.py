"""Namespaces' signing key generations on SQLAlchemy Core (``/v1/namespaces/{ns}/signing-key``).

Only the generation and the overlap's end are stored (``signing_keys``);
the keys are derived from the cluster secret (:mod:`cronman.signing_keys`).
A rotation is one ``UPDATE ... generation + 1``, or the first row's
``INSERT``: two rotations at once give two generations, never one lost.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import select, update
from sqlalchemy.engine import Row

from cronman.signing_keys import KeyState
from cronman.store.engine import Database, Tx
from cronman.store.tables import signing_keys

sk = signing_keys


def _state(row: Row[Any]) -> KeyState:
    return KeyState(row.namespace, row.generation, row.previous_until, row.rotated_at)


class SqlSigningKeyStore:
    """The generation of each namespace's signing key."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def all_states(self) -> list[KeyState]:
        """Every namespace ever rotated (the others are at generation 0)."""
        with self._db.read() as conn:
            return [_state(r) for r in conn.execute(select(sk)).all()]

    def state(self, namespace: str) -> KeyState:
        with self._db.read() as conn:
            row = conn.execute(select(sk).where(sk.c.namespace == namespace)).first()
        return KeyState(namespace) if row is None else _state(row)

    def rotate(self, namespace: str, *, now: datetime, previous_until: datetime) -> KeyState:
        """The next generation signs from now; the current one until ``previous_until``."""

        def bump(tx: Tx) -> KeyState | None:
            row = tx.conn.execute(
                update(sk).where(sk.c.namespace == namespace)
                .values(generation=sk.c.generation + 1, previous_until=previous_until,
                        rotated_at=now)
                .returning(*sk.c)).first()
            return None if row is None else _state(row)

        def first(tx: Tx) -> KeyState:
            tx.conn.execute(sk.insert().values(namespace=namespace, generation=1,
                                               previous_until=previous_until, rotated_at=now))
            return KeyState(namespace, 1, previous_until, now)

        state = self._db.write(bump)
        if state is not None:
            return state
        try:
            return self._db.write(first)
        except sa_exc.IntegrityError:  # rotated at the same moment by another call
            state = self._db.write(bump)
            assert state is not None
            return state
