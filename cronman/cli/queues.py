"""``cronman queues`` (the work queues: depth, held, oldest wait, workers) and
``cronman runs cancel RUN_ID``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from cronman.cli.group import cli
from cronman.cli.options import client_command
from cronman.cli.output import emit, format_table, runs_table, runs_wide
from cronman.cli.runs import runs
from cronman.client import CronmanClient


def queues_table(queues: Sequence[Mapping[str, Any]]) -> str:
    if not queues:
        return "no work queues"
    return format_table(
        ("NAMESPACE", "QUEUE", "DEPTH", "HELD", "OLDEST WAIT S", "WORKERS"),
        [(q["namespace"], q["queue"], q["depth"], q["held"], q.get("oldest_wait_s"),
          ", ".join(f"{w['id']} ({w['held']}/{w['slots']})" for w in q.get("workers", []))
          or None) for q in queues])


@cli.command("queues")
@click.option("--namespace", "-n", default=None, help="only this namespace's queues")
@client_command
def queues(client: CronmanClient, fmt: str, namespace: str | None) -> None:
    """The work queues of worker targets: runs waiting (depth) and held, the
    oldest wait, and the workers seen (runs held / slots)."""
    items = list(client.queues(namespace=namespace))
    emit(fmt, {"items": items, "next_cursor": None}, lambda: queues_table(items))


@runs.command("cancel")
@click.argument("run_id")
@click.option("--reason", default=None, help="said in the run's error")
@client_command
def runs_cancel(client: CronmanClient, fmt: str, run_id: str, reason: str | None) -> None:
    """Cancel a run in flight: a queued worker run ends at once (failed,
    cancelled), a held one's worker is asked to stop on its next heartbeat;
    a container run's node stops its container at its next lease renewal."""
    run = client.cancel_run(run_id, reason)
    emit(fmt, run, lambda: runs_table([run]), lambda: runs_wide([run]))
