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
    JOB_HELP,
    TIME,
    TIME_HELP,
    client_command,
    collect,
    fail,
    first_page_only,
    idempotency_key,
    job_namespace,
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
from cronman.client import (
    BULK_MAX,
    PAGE_MAX,
    BulkCreateError,
    CronmanClient,
    Job,
)
from cronman.vocabulary import RUN_STATUSES

# Keys the API assigns; dropped from a definition read back for an update.
SERVER_KEYS = ("id", "version", "created_at", "updated_at", "next_fire_at", "last_run",
               "state", "pause_reason", "pause_note", "failure_streak", "runs_done",
               "runs_left", "done_at", "paused_at", "buffered")


@cli.group("jobs")
def jobs() -> None:
    """Create, list, change and run jobs through the API.

    A command that takes a JOB takes its id, namespace/name, or a bare name
    with -n NAMESPACE (or one that only one namespace holds).
    """


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
@idempotency_key
@client_command
def jobs_create(client: CronmanClient, fmt: str, path: str, chunk_size: int,
                idempotency_key: str | None) -> None:
    """Create one job, or many (in bulk requests of up to 1,000, with progress).

    With --idempotency-key, bulk request N of several sends KEY/N: the same
    files sent again with the key create only what the first command did not.
    """
    specs = _definitions(path)
    if len(specs) == 1:
        job = client.create_job(specs[0], idempotency_key=idempotency_key)
        emit(fmt, job, lambda: jobs_table([job]), lambda: jobs_wide([job]))
        return
    with progress(len(specs), "creating jobs") as bar:
        try:
            created = client.create_jobs(specs, chunk_size=chunk_size, progress=bar.advance,
                                         idempotency_key=idempotency_key)
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


@jobs.command("get", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@client_command
def jobs_get(client: CronmanClient, fmt: str, job: str, namespace: str | None) -> None:
    """Show one job and its last run."""
    found = client.get_job(job, namespace=namespace)
    emit(fmt, found, lambda: job_details(found))


@jobs.command("update", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@click.option("-f", "--file", "path", default=None,
              help="JSON or YAML: its top-level keys replace the job's ('-': stdin)")
@click.option("--set", "assignments", multiple=True, metavar="PATH=VALUE",
              help="set one value, e.g. --set schedule.cron='0 8 * * *' --set paused=true "
                   "(VALUE is read as YAML; repeatable)")
@click.option("--if-version", type=int, default=None,
              help="refuse unless the job is at this version")
@client_command
def jobs_update(client: CronmanClient, fmt: str, job: str, namespace: str | None,
                path: str | None, assignments: tuple[str, ...],
                if_version: int | None) -> None:
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
    job_id = client.resolve_job(job, namespace)
    current = client.get_job(job_id)
    if if_version is not None and current["version"] != if_version:
        click.echo(f"error: the job is at version {current['version']}, not {if_version}",
                   err=True)
        sys.exit(RET_ERROR)
    spec = {k: v for k, v in current.items() if k not in SERVER_KEYS}
    spec.update({k: v for k, v in changes.items() if k not in SERVER_KEYS})
    for assignment in assignments:
        _assign(spec, assignment)
    updated = client.replace_job(job_id, spec, version=current["version"])
    emit(fmt, updated, lambda: jobs_table([updated]), lambda: jobs_wide([updated]))


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
    @jobs.command(name, help=help_text, epilog=JOB_HELP)
    @click.argument("job")
    @job_namespace
    @click.option("--note", default=None, help="shown with the job (pause_note; at most "
                                              "1024 characters)")
    @client_command
    def command(client: CronmanClient, fmt: str, job: str, namespace: str | None,
                note: str | None) -> None:
        act = client.pause_job if name == "pause" else client.resume_job
        done = act(job, namespace=namespace, note=note)
        emit(fmt, done, lambda: jobs_table([done]), lambda: jobs_wide([done]))


_job_action("pause", "Pause a job (it keeps its schedule; no fires until resumed).")
_job_action("resume", "Resume a paused job (a job its breaker paused starts its count "
                      "again; a done job stays done until its max_runs is raised).")


@jobs.command("trigger", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@idempotency_key
@client_command
def jobs_trigger(client: CronmanClient, fmt: str, job: str, namespace: str | None,
                 idempotency_key: str | None) -> None:
    """Fire a job once now, outside its schedule."""
    run = client.trigger_job(job, namespace=namespace, idempotency_key=idempotency_key)
    emit(fmt, run, lambda: runs_table([run]), lambda: runs_wide([run]))


@jobs.command("next", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@click.option("--count", "-c", type=click.IntRange(1, 100), default=10, show_default=True)
@client_command
def jobs_next(client: CronmanClient, fmt: str, job: str, namespace: str | None,
              count: int) -> None:
    """The job's next fire times (and which an exclusion calendar skips)."""
    answer = client.next_fires(job, count, namespace=namespace)
    times = answer["fire_times"]
    skipped = {e["fire_time"]: e["calendar"] for e in answer.get("excluded") or ()}
    emit(fmt, answer, lambda: "\n".join(
        t + (f"  (skipped: calendar {skipped[t]})" if t in skipped else "") for t in times)
        if times else "no fire times")


@jobs.command("backfill", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@click.option("--since", type=TIME, required=True, help=f"start of the range: {TIME_HELP}")
@click.option("--until", type=TIME, default="now", show_default=True,
              help=f"end of the range (at most now): {TIME_HELP}")
@idempotency_key
@client_command
def jobs_backfill(client: CronmanClient, fmt: str, job: str, namespace: str | None,
                  since: str, until: str, idempotency_key: str | None) -> None:
    """Fire every scheduled time in a range that has no run yet (at most 10,000).

    'now' and relative times are read anew by each command: to repeat one
    with --idempotency-key, give RFC 3339 times (else it is another request).
    """
    answer = client.backfill_job(job, since, until, namespace=namespace,
                                 idempotency_key=idempotency_key)
    emit(fmt, answer, lambda: backfill_text(answer["requested"], answer["fire_times"]))


def backfill_text(requested: int, fire_times: int) -> str:
    """What a backfill did, and why it requested fewer runs than the range has fire times."""
    if fire_times == 0:
        return "requested 0 runs: the job's schedule has no fire times in the range"
    text = (f"requested {requested} {_plural(requested, 'run')} for {fire_times} "
            f"{_plural(fire_times, 'fire time')} in the range")
    had = fire_times - requested
    if had == 0:
        return text
    if requested == 0:
        return text + (": it already has a run" if had == 1 else ": each already has a run")
    return text + f": {had} already {'has a run' if had == 1 else 'have runs'}"


def _plural(n: int, noun: str) -> str:
    return noun if n == 1 else noun + "s"


@jobs.command("runs", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@click.option("--status", "statuses", multiple=True, type=click.Choice([s.value for s in RUN_STATUSES]),
              help="a status (repeatable)")
@click.option("--since", type=TIME, default=None, help=f"scheduled at or after: {TIME_HELP}")
@click.option("--until", type=TIME, default=None, help=f"scheduled before: {TIME_HELP}")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=20, show_default=True)
@click.option("--all", "follow", is_flag=True, help="every run in the range (all pages)")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def jobs_runs(client: CronmanClient, fmt: str, job: str, namespace: str | None,
              statuses: tuple[str, ...], since: str | None, until: str | None, limit: int,
              follow: bool, cursor: str | None) -> None:
    """A job's runs, newest first (runs across jobs: `cronman runs list`)."""
    job_id = client.resolve_job(job, namespace)
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


@jobs.command("history", epilog=JOB_HELP + " (a deleted job: its id)")
@click.argument("job")
@job_namespace
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=20, show_default=True)
@click.option("--all", "follow", is_flag=True, help="every recorded change (all pages)")
@click.option("--cursor", default=None, help="start at this next_cursor of a previous page")
@client_command
def jobs_history(client: CronmanClient, fmt: str, job: str, namespace: str | None,
                 limit: int, follow: bool, cursor: str | None) -> None:
    """Who changed a job, when, through which request, and what changed (newest first).

    -o json or yaml shows each change's definition before and after (secrets redacted).
    """
    job_id = client.resolve_job(job, namespace)
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


@jobs.command("delete", epilog=JOB_HELP)
@click.argument("jobs_", metavar="JOB...", nargs=-1, required=True)
@job_namespace
@click.option("--force", is_flag=True, help="even jobs others depend on (they are left as "
                                            "they are)")
@client_command
def jobs_delete(client: CronmanClient, fmt: str, jobs_: Sequence[str], namespace: str | None,
                force: bool) -> None:
    """Delete jobs (a job other jobs depend on only with --force)."""
    deleted: list[str] = []
    for job in jobs_:
        job_id = client.resolve_job(job, namespace)
        if force:
            client.delete_job_forced(job_id)
        else:
            client.delete_job(job_id)
        deleted.append(job_id)
        if fmt == "table" or fmt == "wide":
            click.echo(f"deleted {job}" if job == job_id else f"deleted {job} ({job_id})")
    if fmt == "json":
        click.echo(to_json({"deleted": deleted}))
    elif fmt == "yaml":
        click.echo(to_yaml({"deleted": deleted}))
