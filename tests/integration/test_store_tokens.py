"""TokenStore against SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib

from sqlalchemy import text

from cronman.store import open_store
from cronman.store import tokens as tokens_mod


def test_create_find_revoke(store):
    assert store.tokens.any_token_created() is False
    secret, record = store.tokens.create_token("billing-ci", ["billing", "ops"])
    assert secret.startswith("cm_") and len(secret) > 40
    assert record["namespaces"] == ["billing", "ops"] and record["admin"] is False
    assert store.tokens.any_token_created() is True
    found = store.tokens.find_token(secret)
    assert found["id"] == record["id"] and found["namespaces"] == ["billing", "ops"]
    assert "token_hash" not in found
    assert store.tokens.find_token(secret + "x") is None
    assert store.tokens.find_token("") is None

    admin_secret, admin = store.tokens.create_token("root", None)
    assert admin["admin"] is True and store.tokens.find_token(admin_secret)["namespaces"] is None
    assert [t["name"] for t in store.tokens.list_tokens()] == ["billing-ci", "root"]

    assert store.tokens.revoke_token(record["id"]) is True
    assert store.tokens.revoke_token(record["id"]) is False
    assert store.tokens.find_token(secret) is None
    assert store.tokens.any_token_created() is True
    store.tokens.revoke_token(admin["id"])
    # Every token revoked: tokens were created, so the API still requires one.
    assert store.tokens.any_token_created() is True
    assert all(t["revoked_at"] is not None for t in store.tokens.list_tokens())


def test_only_the_hash_is_stored(store):
    secret, record = store.tokens.create_token("t", ["a"])
    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT token_hash FROM api_tokens WHERE id = :id"),
                              {"id": record["id"]}).scalar_one()
    assert stored == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in stored


def test_other_stores_see_changes_after_the_cache_period(database_url, monkeypatch):
    clock = [1000.0]
    api = open_store(database_url)
    cli = open_store(database_url)
    try:
        api.tokens._clock = lambda: clock[0]
        assert api.tokens.any_token_created() is False
        secret, record = cli.tokens.create_token("late", None)
        assert api.tokens.any_token_created() is False  # cached
        clock[0] += tokens_mod.CACHE_SECONDS + 0.1
        assert api.tokens.any_token_created() is True
        assert api.tokens.find_token(secret)["id"] == record["id"]
        cli.tokens.revoke_token(record["id"])
        clock[0] += tokens_mod.CACHE_SECONDS + 0.1
        assert api.tokens.find_token(secret) is None
        assert api.tokens.any_token_created() is True
    finally:
        api.close()
        cli.close()
