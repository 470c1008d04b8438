"""``cronman tokens create | list | revoke``: API tokens, straight in the database.

The way to make the first admin token: the API manages tokens for admin
tokens only (``cronman tokens api ...``, :mod:`cronman.cli.tokens_client`,
which also holds the ``tokens`` group these commands attach to). The secret
is printed once, at creation; the database keeps only its hash. Once any
token exists the API requires one on every /v1 call. Each creation and
revocation is recorded in the token history as made by
``database:<user>@<host>``.
"""

from __future__ import annotations

import getpass
import json
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from cronman.api.validation import check_namespace
from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE
from cronman.cli.tokens_client import DATABASE_COMMANDS, SECRET_WARNING, tokens, tokens_table
from cronman.config import Settings
from cronman.errors import CronmanError, StoreUnavailable, ValidationError
from cronman.store.records import TokenActor
from cronman.timeutil import format_rfc3339
from cronman.vocabulary import DATABASE_ACTOR


def database_actor() -> TokenActor:
    """Who makes a change with database access, as the token history names them."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = "unknown"
    return TokenActor(name=f"{DATABASE_ACTOR}:{user}@{socket.gethostname()}")


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


@tokens.command("create", short_help=DATABASE_COMMANDS["create"])
@click.option("--namespace", "namespaces", multiple=True,
              help="a namespace the token may use (repeatable)")
@click.option("--admin", is_flag=True, help="all namespaces")
@click.option("--read-only", is_flag=True,
              help="the token may read (GET) but never change anything: every write is a 403")
@click.option("--name", default=None, help="a label for the token")
@click.option("--json", "as_json", is_flag=True)
@database_option
def tokens_create(namespaces: tuple[str, ...], admin: bool, read_only: bool, name: str | None,
                  as_json: bool, database_url: str | None) -> None:
    """[database] Create a token and print its secret (shown only this once).

    Made straight in the database: the way to the first admin token, which
    `cronman tokens api ...` then uses to manage the others through the API.
    """
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
        secret, record = store.create_token(label, None if admin else sorted(set(namespaces)),
                                            read_only=read_only, actor=database_actor())
    if as_json:
        click.echo(json.dumps({"token": secret, **_jsonable(record)}, indent=2))
        return
    scope = "all namespaces" if admin else ", ".join(sorted(set(namespaces)))
    if read_only:
        scope += ", read-only"
    click.echo(f"token {record.get('id')} ({label}; {scope}):")
    click.echo(secret)
    click.echo(SECRET_WARNING, err=True)


@tokens.command("list", short_help=DATABASE_COMMANDS["list"])
@click.option("--json", "as_json", is_flag=True)
@database_option
def tokens_list(as_json: bool, database_url: str | None) -> None:
    """[database] List tokens (never their secrets); through the API: `cronman tokens api list`."""
    with _tokens(database_url) as store:
        records = [_jsonable(r) for r in store.list_tokens()]
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    click.echo(tokens_table(records))


@tokens.command("revoke", short_help=DATABASE_COMMANDS["revoke"])
@click.argument("token_id")
@database_option
def tokens_revoke(token_id: str, database_url: str | None) -> None:
    """[database] Revoke a token (the API refuses it within a few seconds;
    `cronman tokens api revoke` answers once it does)."""
    with _tokens(database_url) as store:
        ok = store.revoke_token(token_id, actor=database_actor())
    if not ok:
        click.echo(f"error: no active token {token_id!r}", err=True)
        sys.exit(RET_ERROR)
    click.echo(f"revoked {token_id}")
