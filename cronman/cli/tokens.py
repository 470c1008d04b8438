"""``cronman tokens create | list | revoke``: API tokens, straight in the database.

The secret is printed once, at creation; the database keeps only its hash.
Once any token exists the API requires one on every /v1 call.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from cronman.api.validation import check_namespace
from cronman.cli.client import format_table
from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, cli
from cronman.config import Settings
from cronman.errors import CronmanError, StoreUnavailable, ValidationError
from cronman.timeutil import format_rfc3339


def _jsonable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: format_rfc3339(v) if isinstance(v, datetime) else v for k, v in record.items()}


@contextmanager
def _tokens(database_url: str | None) -> Iterator[Any]:
    from cronman.store import open_store

    settings = Settings.from_env({"database_url": database_url})
    try:
        store = open_store(settings.database_url, settings=settings)
    except Exception as exc:
        click.echo(f"error: cannot open the database: {exc}", err=True)
        sys.exit(RET_UNAVAILABLE)
    try:
        yield store.tokens
    except StoreUnavailable as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(RET_UNAVAILABLE)
    except CronmanError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(RET_ERROR)
    finally:
        store.close()


database_option = click.option(
    "--database-url", default=None, help="SQLAlchemy URL [env CRONMAN_DATABASE_URL]")


@cli.group("tokens")
def tokens() -> None:
    """Manage API tokens (stored hashed in the database)."""


@tokens.command("create")
@click.option("--namespace", "namespaces", multiple=True,
              help="a namespace the token may use (repeatable)")
@click.option("--admin", is_flag=True, help="all namespaces")
@click.option("--name", default=None, help="a label for the token")
@click.option("--json", "as_json", is_flag=True)
@database_option
def tokens_create(namespaces: tuple[str, ...], admin: bool, name: str | None,
                  as_json: bool, database_url: str | None) -> None:
    """Create a token and print its secret (shown only this once)."""
    if admin and namespaces:
        raise click.UsageError("--admin and --namespace exclude each other")
    if not admin and not namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --admin")
    for ns in namespaces:
        try:
            check_namespace(ns)
        except ValidationError as exc:
            raise click.BadParameter(f"{ns!r}: {exc.message}", param_hint="--namespace") from None
    label = name or ("admin" if admin else ",".join(namespaces))
    with _tokens(database_url) as store:
        secret, record = store.create_token(label, None if admin else sorted(set(namespaces)))
    if as_json:
        click.echo(json.dumps({"token": secret, **_jsonable(record)}, indent=2))
        return
    scope = "all namespaces" if admin else ", ".join(sorted(set(namespaces)))
    click.echo(f"token {record.get('id')} ({label}; {scope}):")
    click.echo(secret)
    click.echo("Keep it now: it is stored hashed and cannot be shown again.", err=True)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True)
@database_option
def tokens_list(as_json: bool, database_url: str | None) -> None:
    """List tokens (never their secrets)."""
    with _tokens(database_url) as store:
        records = [_jsonable(r) for r in store.list_tokens()]
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    click.echo(format_table(
        ("ID", "NAME", "NAMESPACES", "CREATED", "REVOKED"),
        [(r.get("id"), r.get("name"),
          "(all)" if r.get("namespaces") is None else ",".join(r["namespaces"]),
          r.get("created_at"), r.get("revoked_at")) for r in records]))


@tokens.command("revoke")
@click.argument("token_id")
@database_option
def tokens_revoke(token_id: str, database_url: str | None) -> None:
    """Revoke a token (the API refuses it within a few seconds)."""
    with _tokens(database_url) as store:
        ok = store.revoke_token(token_id)
    if not ok:
        click.echo(f"error: no active token {token_id!r}", err=True)
        sys.exit(RET_ERROR)
    click.echo(f"revoked {token_id}")
