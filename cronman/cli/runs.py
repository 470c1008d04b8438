"""``cronman runs list | get | replay`` (``jobs replay`` too) and ``cronman cluster``."""

from __future__ import annotations

from typing import Any

import click

from cronman.cli.group import cli
from cronman.cli.jobs import jobs
from cronman.cli.options import (
    TIME,
    TIME_HELP,
    client_command,
    collect,
    first_page_only,
    idempotency_key,
    more_hint,
)
from cronman.cli.output import (
    cluster_text,
    emit,
    run_details,
    run_items_table,
    run_items_wide,
    runs_table,
    runs_wide,
)
from cronman.client import PAGE_MAX, CronmanClient, RunItem
from cronman.vocabulary import RUN_STATUSES, TARGET_KINDS


@cli.group("runs")
def runs() -> None:
    """List, read and replay runs (runs across jobs; a job's runs: `cronman jobs runs JOB`)."""


@runs.command("list")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice([s.value for s in RUN_STATUSES]), help="a status (repeatable)")
@click.option("--since", type=TIME, default=None,
              help=f"scheduled at or after: {TIME_HELP} [default: the oldest run kept]")
@click.option("--until", type=TIME, default=None,
              help=f"scheduled before: {TIME_HELP} [default: a day from now]")
@click.option("--namespace", "-n", default=None,
              help="only jobs of this namespace (and where a bare --job name lives)")
@click.option("--job", "job_ids", multiple=True, metavar="JOB",
              help="only this job's runs: an id, namespace/name, or a name (repeatable, "
                   "at most 100)")
@click.option("--target-kind", "target_kinds", multiple=True,
              type=click.Choice([k.value for k in TARGET_KINDS]),
              help="only jobs with this kind of target (repeatable)")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=20, show_default=True,
              help="runs per page")
@click.option("--all", "follow", is_flag=True, help="every matching run (all pages)")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def runs_list(client: CronmanClient, fmt: str, statuses: tuple[str, ...], since: str | None,
              until: str | None, namespace: str | None, job_ids: tuple[str, ...],
              target_kinds: tuple[str, ...], limit: int, follow: bool,
              cursor: str | None) -> None:
    """Runs across jobs, newest scheduled first (only the token's namespaces).

    \b
    cronman runs list --status failed --since -1h      # what failed in the last hour
    cronman runs list -n billing --status failed --status lost --all -o json
    cronman runs list --job billing/digest --job JOB_ID --since 2026-11-01T00:00:00Z
    """
    filters: dict[str, Any] = {"statuses": statuses, "since": since, "until": until,
                               "namespace": namespace, "job_ids": job_ids,
                               "target_kinds": target_kinds}
    items: list[RunItem]
    if follow:
        first_page_only(cursor)
        items = collect(client.iter_runs(**filters, page_size=limit), "runs", limit)
        cursor = None
    else:
        page = client.list_runs(**filters, limit=limit, cursor=cursor)
        items, cursor = page.items, page.next_cursor
    emit(fmt, {"items": items, "next_cursor": cursor}, lambda: run_items_table(items),
         lambda: run_items_wide(items))
    more_hint(fmt, "runs", cursor)


@runs.command("get")
@click.argument("run_id")
@client_command
def runs_get(client: CronmanClient, fmt: str, run_id: str) -> None:
    """Show one run."""
    run = client.get_run(run_id)
    emit(fmt, run, lambda: run_details(run), lambda: runs_wide([run]))


def _replay(client: CronmanClient, fmt: str, run_id: str, key: str | None) -> None:
    run = client.replay_run(run_id, idempotency_key=key)
    emit(fmt, run, lambda: runs_table([run]), lambda: runs_wide([run]))


@runs.command("replay")
@click.argument("run_id")
@idempotency_key
@client_command
def runs_replay(client: CronmanClient, fmt: str, run_id: str,
                idempotency_key: str | None) -> None:
    """Dispatch a finished run's target again, as a new attempt (same run id)."""
    _replay(client, fmt, run_id, idempotency_key)


@jobs.command("replay")
@click.argument("run_id")
@idempotency_key
@client_command
def jobs_replay(client: CronmanClient, fmt: str, run_id: str,
                idempotency_key: str | None) -> None:
    """Dispatch a finished run of a job again (the same as `cronman runs replay`)."""
    _replay(client, fmt, run_id, idempotency_key)


@cli.command("cluster")
@client_command
def cluster(client: CronmanClient, fmt: str) -> None:
    """The scheduler nodes (membership table) and worker agents."""
    answer = client.cluster()
    emit(fmt, answer, lambda: cluster_text(answer))
