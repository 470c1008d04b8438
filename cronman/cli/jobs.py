"""``cronman jobs ...``: create, list, read, change and act on jobs through the API."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
import yaml

from cronman.cli.documents import DocumentError, load_definitions
from cronman.cli.group import RET_ERROR, cli
from cronman.cli.options import (
    client_command,
    collect,
    fail,
    first_page_only,
    more_hint,
    progress,
)
from cronman.cli.output import (
    emit,
    history_table,
    history_wide,
    job_details,
    jobs_table,
    jobs_wide,
    runs_table,
    runs_wide,
    to_json,
    to_yaml,
)
from cronman.client import BULK_MAX, PAGE_MAX, BulkCreateError, CronmanClient, Job
from cronman.vocabulary import RUN_STATUSES

# Keys the API assigns; dropped from a definition read back for an update.
SERVER_KEYS = ("id", "version", "created_at", "updated_at", "next_fire_at", "last_run")


@cli.group("jobs")
def jobs() -> None:
    """Create, list, change and run jobs through the API."""


def _definitions(path: str) -> list[dict[str, Any]]:
    try:
        return [d.spec for d in load_definitions([path])]
    except DocumentError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None


@jobs.command("create")
@click.option("-f", "--file", "path", required=True,
              help="a JSON or YAML file with one job, a list of jobs or {\"jobs\": [...]}, "
                   "or a folder of such files ('-': stdin)")
@click.option("--chunk-size", type=click.IntRange(1, BULK_MAX), default=BULK_MAX,
              show_default=True, help="jobs per bulk request (each is all or nothing)")
@client_command
def jobs_create(client: CronmanClient, fmt: str, path: str, chunk_size: int) -> None:
    """Create one job, or many (in bulk requests of up to 1,000, with progress)."""
    specs = _definitions(path)
    if len(specs) == 1:
        job = client.create_job(specs[0])
        emit(fmt, job, lambda: jobs_table([job]), lambda: jobs_wide([job]))
        return
    with progress(len(specs), "creating jobs") as bar:
        try:
            created = client.create_jobs(specs, chunk_size=chunk_size, progress=bar.advance)
        except BulkCreateError as exc:
            if exc.created:
                click.echo(f"created {len(exc.created)} of {len(specs)} jobs before the "
                           "error (each bulk request is all or nothing)", err=True)
            fail(exc)
            return
    emit(fmt, {"items": created}, lambda: jobs_table(created), lambda: jobs_wide(created))


@jobs.command("list")
@click.option("--namespace", "-n", default=None)
@click.option("--label", "-l", "labels", multiple=True, help="key:value (repeatable)")
@click.option("--paused", type=click.Choice(["true", "false"]), default=None)
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=100, show_default=True)
@click.option("--all", "follow", is_flag=True, help="follow next_cursor to the end")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def jobs_list(client: CronmanClient, fmt: str, namespace: str | None,
              labels: tuple[str, ...], paused: str | None, limit: int, follow: bool,
              cursor: str | None) -> None:
    """List jobs."""
    paused_flag = None if paused is None else paused == "true"
    if follow:
        first_page_only(cursor)
        items: list[Job] = []
        for job in client.iter_jobs(namespace=namespace, labels=labels, paused=paused_flag,
                                    page_size=limit):
            items.append(job)
            if sys.stderr.isatty() and len(items) % limit == 0:
                click.echo(f"\rfetched {len(items)} jobs…", err=True, nl=False)
        if sys.stderr.isatty():
            click.echo("\r" + " " * 40 + "\r", err=True, nl=False)
        cursor = None
    else:
        page = client.list_jobs(namespace=namespace, labels=labels, paused=paused_flag,
                                limit=limit, cursor=cursor)
        items, cursor = page.items, page.next_cursor
    emit(fmt, {"items": items, "next_cursor": cursor}, lambda: jobs_table(items),
         lambda: jobs_wide(items))
    more_hint(fmt, "jobs", cursor)


@jobs.command("get")
@click.argument("job_id")
@client_command
def jobs_get(client: CronmanClient, fmt: str, job_id: str) -> None:
    """Show one job and its last run."""
    job = client.get_job(job_id)
    emit(fmt, job, lambda: job_details(job))


@jobs.command("update")
@click.argument("job_id")
@click.option("-f", "--file", "path", default=None,
              help="JSON or YAML: its top-level keys replace the job's ('-': stdin)")
@click.option("--set", "assignments", multiple=True, metavar="PATH=VALUE",
              help="set one value, e.g. --set schedule.cron='0 8 * * *' --set paused=true "
                   "(VALUE is read as YAML; repeatable)")
@click.option("--if-version", type=int, default=None,
              help="refuse unless the job is at this version")
@client_command
def jobs_update(client: CronmanClient, fmt: str, job_id: str, path: str | None,
                assignments: tuple[str, ...], if_version: int | None) -> None:
    """Change a job: keys from a file and/or single values.

    The job is read, changed and written back with its version, so a change
    made by someone else in between is refused (409), never overwritten.
    """
    if path is None and not assignments:
        raise click.UsageError("give -f FILE and/or --set PATH=VALUE")
    changes: dict[str, Any] = {}
    if path is not None:
        specs = _definitions(path)
        if len(specs) != 1:
            raise click.BadParameter(f"holds {len(specs)} jobs; update takes one",
                                     param_hint="-f")
        changes = specs[0]
    current = client.get_job(job_id)
    if if_version is not None and current["version"] != if_version:
        click.echo(f"error: the job is at version {current['version']}, not {if_version}",
                   err=True)
        sys.exit(RET_ERROR)
    spec = {k: v for k, v in current.items() if k not in SERVER_KEYS}
    spec.update({k: v for k, v in changes.items() if k not in SERVER_KEYS})
    for assignment in assignments:
        _assign(spec, assignment)
    job = client.replace_job(job_id, spec, version=current["version"])
    emit(fmt, job, lambda: jobs_table([job]), lambda: jobs_wide([job]))


def _assign(spec: dict[str, Any], assignment: str) -> None:
    path, sep, raw = assignment.partition("=")
    if not sep or not path:
        raise click.BadParameter(f"{assignment!r} is not PATH=VALUE", param_hint="--set")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{assignment!r}: {exc}", param_hint="--set") from None
    keys = path.split(".")
    node: Any = spec
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise click.BadParameter(f"{'.'.join(keys[:i + 1])} is not an object",
                                     param_hint="--set")
        node = child
    node[keys[-1]] = value


def _job_action(name: str, help_text: str) -> None:
    @jobs.command(name, help=help_text)
    @click.argument("job_id")
    @client_command
    def command(client: CronmanClient, fmt: str, job_id: str) -> None:
        job = client.pause_job(job_id) if name == "pause" else client.resume_job(job_id)
        emit(fmt, job, lambda: jobs_table([job]), lambda: jobs_wide([job]))


_job_action("pause", "Pause a job (it keeps its schedule; no fires until resumed).")
_job_action("resume", "Resume a paused job.")


@jobs.command("trigger")
@click.argument("job_id")
@client_command
def jobs_trigger(client: CronmanClient, fmt: str, job_id: str) -> None:
    """Fire a job once now, outside its schedule."""
    run = client.trigger_job(job_id)
    emit(fmt, run, lambda: runs_table([run]), lambda: runs_wide([run]))


@jobs.command("next")
@click.argument("job_id")
@click.option("--count", "-c", type=click.IntRange(1, 100), default=10, show_default=True)
@client_command
def jobs_next(client: CronmanClient, fmt: str, job_id: str, count: int) -> None:
    """The job's next fire times (and which an exclusion calendar skips)."""
    answer = client.next_fires(job_id, count)
    times = answer["fire_times"]
    skipped = {e["fire_time"]: e["calendar"] for e in answer.get("excluded") or ()}
    emit(fmt, answer, lambda: "\n".join(
        t + (f"  (skipped: calendar {skipped[t]})" if t in skipped else "") for t in times)
        if times else "no fire times")


@jobs.command("backfill")
@click.argument("job_id")
@click.option("--since", required=True, help="RFC 3339 (start of the range)")
@click.option("--until", required=True, help="RFC 3339 (end of the range)")
@client_command
def jobs_backfill(client: CronmanClient, fmt: str, job_id: str, since: str, until: str) -> None:
    """Fire every scheduled time in a range that has no run yet (at most 10,000)."""
    answer = client.backfill_job(job_id, since, until)
    emit(fmt, answer, lambda: f"requested {answer['requested']} runs "
                              f"({answer['fire_times']} fire times in the range)")


@jobs.command("runs")
@click.argument("job_id")
@click.option("--status", "statuses", multiple=True, type=click.Choice([s.value for s in RUN_STATUSES]),
              help="a status (repeatable)")
@click.option("--since", default=None, help="RFC 3339")
@click.option("--until", default=None, help="RFC 3339")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=20, show_default=True)
@click.option("--all", "follow", is_flag=True, help="every run in the range (all pages)")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def jobs_runs(client: CronmanClient, fmt: str, job_id: str, statuses: tuple[str, ...],
              since: str | None, until: str | None, limit: int, follow: bool,
              cursor: str | None) -> None:
    """A job's runs, newest first (runs across jobs: `cronman runs list`)."""
    if follow:
        first_page_only(cursor)
        runs = collect(client.iter_job_runs(job_id, since=since, until=until,
                                            statuses=statuses, page_size=limit),
                       "runs", limit)
        cursor = None
    else:
        page = client.list_job_runs(job_id, since=since, until=until, statuses=statuses,
                                    limit=limit, cursor=cursor)
        runs, cursor = page.items, page.next_cursor
    emit(fmt, {"items": runs, "next_cursor": cursor}, lambda: runs_table(runs),
         lambda: runs_wide(runs))
    more_hint(fmt, "runs", cursor)


@jobs.command("history")
@click.argument("job_id")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=20, show_default=True)
@click.option("--all", "follow", is_flag=True, help="every recorded change (all pages)")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def jobs_history(client: CronmanClient, fmt: str, job_id: str, limit: int,
                 follow: bool, cursor: str | None) -> None:
    """Who changed a job, when, through which request, and what changed (newest first).

    -o json or yaml shows each change's definition before and after (secrets redacted).
    """
    if follow:
        first_page_only(cursor)
        entries = collect(client.iter_job_history(job_id, page_size=limit), "changes", limit)
        cursor = None
    else:
        page = client.list_job_history(job_id, limit=limit, cursor=cursor)
        entries, cursor = page.items, page.next_cursor
    emit(fmt, {"items": entries, "next_cursor": cursor}, lambda: history_table(entries),
         lambda: history_wide(entries))
    more_hint(fmt, "changes", cursor)


@jobs.command("delete")
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="even jobs others depend on (they are left as "
                                            "they are)")
@client_command
def jobs_delete(client: CronmanClient, fmt: str, job_ids: Sequence[str], force: bool) -> None:
    """Delete jobs (a job other jobs depend on only with --force)."""
    for job_id in job_ids:
        if force:
            client.delete_job_forced(job_id)
        else:
            client.delete_job(job_id)
        if fmt == "table" or fmt == "wide":
            click.echo(f"deleted {job_id}")
    if fmt == "json":
        click.echo(to_json({"deleted": list(job_ids)}))
    elif fmt == "yaml":
        click.echo(to_yaml({"deleted": list(job_ids)}))
