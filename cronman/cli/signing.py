"""``cronman signing-key``: a namespace's callback signing keys, through the API.

    cronman signing-key show billing            # the keys its receivers should hold
    export CRONMAN_SIGNING_KEY=$(cronman signing-key show billing -q)
    cronman signing-key rotate billing --overlap 3600

Needs a token that may write to the namespace (--token / CRONMAN_TOKEN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from cronman.cli.group import cli
from cronman.cli.options import client_command
from cronman.cli.output import emit, format_table
from cronman.client import CronmanClient

MAX_OVERLAP = 30 * 86_400


def keys_table(keys: Mapping[str, Any]) -> str:
    rows = [(k.get("generation"), "current" if k.get("signs_until") is None
             else f"previous, signs until {k['signs_until']}", k.get("key"))
            for k in keys.get("keys") or ()]
    return format_table(("GENERATION", "STATE", "KEY"), rows)


@cli.group("signing-key")
def signing_key() -> None:
    """A namespace's callback signing keys (Cronman-Signature v2).

    Each namespace signs with its own key: give it to the namespace's
    receivers (cronman.receiver.CallbackReceiver(key, url=...)). After a
    rotation each scheduler node signs with the previous key alone until its
    next poll (CRONMAN_SYNC_POLL_INTERVAL, 2 s), then with both until the
    overlap ends, then with the new one alone: receivers hold both keys
    through the overlap. Rotating again inside it drops the older previous
    key at once.
    """


@signing_key.command("show")
@click.argument("namespace")
@click.option("-q", "--quiet", is_flag=True,
              help="print only the current key (for CRONMAN_SIGNING_KEY=$(...))")
@client_command
def show(client: CronmanClient, fmt: str, namespace: str, quiet: bool) -> None:
    """The keys that sign the namespace's callbacks now (current first)."""
    keys = client.signing_keys(namespace)
    if quiet:
        current = [k for k in keys.get("keys") or () if k.get("signs_until") is None]
        click.echo(current[0]["key"] if current else "")
        return
    emit(fmt, keys, lambda: keys_table(keys))


@signing_key.command("rotate")
@click.argument("namespace")
@click.option("--overlap", type=click.IntRange(0, MAX_OVERLAP), default=None,
              help="seconds from now the previous key keeps signing alongside (default: a "
                   "day; 0 retires it at once, for a leaked key)")
@client_command
def rotate(client: CronmanClient, fmt: str, namespace: str, overlap: int | None) -> None:
    """Start the namespace's next key; print the keys that sign now.

    Nodes start signing with the new key on their next poll (a few seconds)
    and the previous key signs alongside until its "signs until": give
    receivers the new key next to the old one (CallbackReceiver([new, old],
    url=...)) and drop the old one only after that. Rotating again before it
    drops the older previous key at once (at most two keys sign).
    """
    keys = client.rotate_signing_key(namespace, overlap=overlap)
    emit(fmt, keys, lambda: keys_table(keys))
