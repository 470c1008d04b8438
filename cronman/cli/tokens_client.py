"""``cronman tokens``: API tokens, through the API or straight in the database.

    cronman tokens api create --namespace billing --name billing-ci   # with an admin token
    cronman tokens api list
    cronman tokens api revoke TOKEN_ID
    cronman tokens create --admin          # the first admin token: database access

Every ``/v1`` call needs a token once one exists, and ``/v1/tokens`` takes
admin tokens only, so the first admin token is made with database access
(``cronman.cli.tokens``, a server command: loaded when called, with the
server's dependencies). Everything else goes through the API with the light
client, like the other client commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import click

from cronman.cli.group import _needs_server, cli, missing_server_packages
from cronman.cli.options import client_command, collect, first_page_only, more_hint
from cronman.cli.output import emit, format_table, to_json, to_yaml
from cronman.client import PAGE_MAX, ApiToken, CronmanClient

# The database-side subcommands (cronman.cli.tokens) and their one-line help.
DATABASE_MODULE = "cronman.cli.tokens"
DATABASE_COMMANDS = {
    "create": "[database] Create a token and print its secret (the first admin token).",
    "list": "[database] List tokens (never their secrets).",
    "revoke": "[database] Revoke a token.",
}
SECRET_WARNING = "Keep it now: it is stored hashed and cannot be shown again."


class TokensGroup(click.Group):
    """The API subcommands are here; the database ones are imported when called
    or listed, and name the server extra when its dependencies are missing."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(DATABASE_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in DATABASE_COMMANDS:
            missing = missing_server_packages()
            if missing:
                return _needs_server(f"tokens {cmd_name}", DATABASE_COMMANDS[cmd_name],
                                     missing)
            importlib.import_module(DATABASE_MODULE)
        return self.commands.get(cmd_name)


@cli.group("tokens", cls=TokensGroup)
def tokens() -> None:
    """Manage API tokens: through the API, or in the database for the first one.

    \b
    cronman tokens api create|list|revoke   through the API, with an admin token
                                            (--url, --token; CRONMAN_URL, CRONMAN_TOKEN)
    cronman tokens create|list|revoke       [database] straight in the database
                                            (--database-url; CRONMAN_DATABASE_URL)

    The API manages tokens for admin tokens only, so the first admin token is
    made in the database: `cronman tokens create --admin` on a host that
    reaches it. Every later token can be made, listed and revoked through the
    API. Either way each change is recorded in the token history (who, when,
    through which request).
    """


# -- output ----------------------------------------------------------------------------


def scope_text(token: Mapping[str, Any]) -> str:
    namespaces = token.get("namespaces")
    scope = "all namespaces" if namespaces is None else ", ".join(namespaces)
    return scope + (", read-only" if token.get("read_only") else "")


def tokens_table(records: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "NAME", "NAMESPACES", "ACCESS", "CREATED", "REVOKED"),
        [(r.get("id"), r.get("name"),
          "(all)" if r.get("namespaces") is None else ",".join(r["namespaces"]),
          "read-only" if r.get("read_only") else "read-write",
          r.get("created_at"), r.get("revoked_at")) for r in records])


def secret_text(token: Mapping[str, Any]) -> str:
    """The lines that show a new token's secret (the warning goes to stderr)."""
    return f"token {token.get('id')} ({token.get('name')}; {scope_text(token)}):\n" \
           f"{token['token']}"


# -- through the API -------------------------------------------------------------------


@tokens.group("api")
def tokens_api() -> None:
    """Through the API, with an admin token: create, list, revoke.

    The token comes from --token or CRONMAN_TOKEN and must be an admin token
    (`cronman tokens create --admin` makes the first one in the database).
    """


@tokens_api.command("create")
@click.option("--namespace", "namespaces", multiple=True,
              help="a namespace the token may use (repeatable)")
@click.option("--admin", is_flag=True, help="all namespaces, and managing tokens")
@click.option("--read-only", is_flag=True,
              help="the token may read (GET) but never change anything: every write is a 403")
@click.option("--name", default=None, help="a label for the token")
@client_command
def api_create(client: CronmanClient, fmt: str, namespaces: tuple[str, ...], admin: bool,
               read_only: bool, name: str | None) -> None:
    """Create a token and print its secret (shown only this once)."""
    if admin and namespaces:
        raise click.UsageError("--admin and --namespace exclude each other")
    if not admin and not namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --admin")
    made = client.create_token(namespaces=namespaces or None, admin=admin,
                               read_only=read_only, name=name)
    emit(fmt, made, lambda: secret_text(made))
    if fmt in ("table", "wide"):
        click.echo(SECRET_WARNING, err=True)


@tokens_api.command("list")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=100, show_default=True)
@click.option("--all", "follow", is_flag=True, help="follow next_cursor to the end")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def api_list(client: CronmanClient, fmt: str, limit: int, follow: bool,
             cursor: str | None) -> None:
    """List tokens, revoked ones too, oldest first (never their secrets)."""
    items: list[ApiToken]
    if follow:
        first_page_only(cursor)
        items = collect(client.iter_tokens(page_size=limit), "tokens", limit)
        cursor = None
    else:
        page = client.list_tokens(limit=limit, cursor=cursor)
        items, cursor = page.items, page.next_cursor
    emit(fmt, {"items": items, "next_cursor": cursor}, lambda: tokens_table(items))
    more_hint(fmt, "tokens", cursor)


@tokens_api.command("revoke")
@click.argument("token_ids", nargs=-1, required=True)
@client_command
def api_revoke(client: CronmanClient, fmt: str, token_ids: Sequence[str]) -> None:
    """Revoke tokens: once this returns, the API refuses them (401) everywhere."""
    for token_id in token_ids:
        client.revoke_token(token_id)
        if fmt in ("table", "wide"):
            click.echo(f"revoked {token_id}")
    if fmt == "json":
        click.echo(to_json({"revoked": list(token_ids)}))
    elif fmt == "yaml":
        click.echo(to_yaml({"revoked": list(token_ids)}))
