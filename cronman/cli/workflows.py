"""``cronman jobs deps`` and ``cronman calendars ...``: dependencies and exclusion calendars.

    cronman jobs deps billing/digest               # upstream and downstream jobs
    cronman calendars create -f de-holidays.yaml   # {namespace, name, timezone, dates}
    cronman calendars list -n billing
    cronman calendars delete ID --force            # even though jobs name it

Why a run waited or was skipped: ``cronman jobs runs JOB`` (its GATE
column; ``-o yaml`` shows the whole ``gate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from cronman.cli.documents import DocumentError, load_definitions
from cronman.cli.group import cli
from cronman.cli.jobs import jobs
from cronman.cli.options import JOB_HELP, client_command, job_namespace
from cronman.cli.output import emit, format_table
from cronman.client import PAGE_MAX, CronmanClient

CALENDAR_SERVER_KEYS = ("id", "created_at", "updated_at")


def edges_table(deps: Mapping[str, Any]) -> str:
    rows = []
    for side in ("upstream", "downstream"):
        for e in deps.get(side) or ():
            name = (f"{e['namespace']}/{e['name']}" if e.get("namespace") is not None
                    else "(outside the token's namespaces)")
            rows.append((side, e["kind"], e["job_id"], name, "yes" if e["deleted"] else ""))
    if not rows:
        return "no upstream or downstream jobs"
    return format_table(("SIDE", "KIND", "JOB ID", "JOB", "DELETED"), rows)


@jobs.command("deps", epilog=JOB_HELP)
@click.argument("job")
@job_namespace
@client_command
def jobs_deps(client: CronmanClient, fmt: str, job: str, namespace: str | None) -> None:
    """A job's upstream jobs (it depends on them, or runs after them) and
    downstream jobs (they depend on it, or run after it)."""
    deps = client.job_dependencies(job, namespace=namespace)
    emit(fmt, deps, lambda: edges_table(deps))


@cli.group("calendars")
def calendars() -> None:
    """Named exclusion calendars: dates on which the jobs naming them do not fire."""


def calendars_table(items: Sequence[Mapping[str, Any]]) -> str:
    def dates(c: Mapping[str, Any]) -> str:
        shown = c["dates"][:6]
        more = f" (+{len(c['dates']) - 6})" if len(c["dates"]) > 6 else ""
        return ", ".join(shown) + more

    return format_table(("ID", "NAMESPACE", "NAME", "TIMEZONE", "DATES", "VERSION"),
                        [(c["id"], c["namespace"], c["name"], c["timezone"], dates(c),
                          c["version"]) for c in items])


def _calendar_file(path: str) -> dict[str, Any]:
    try:
        found = load_definitions([path])
    except DocumentError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None
    if len(found) != 1:
        raise click.BadParameter(f"{path}: one calendar per file, found {len(found)}",
                                 param_hint="-f")
    return {k: v for k, v in found[0].spec.items() if k not in CALENDAR_SERVER_KEYS}


@calendars.command("list")
@click.option("--namespace", "-n", default=None)
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=100, show_default=True)
@client_command
def calendars_list(client: CronmanClient, fmt: str, namespace: str | None, limit: int) -> None:
    """Exclusion calendars."""
    page = client.list_calendars(namespace=namespace, limit=limit)
    items = list(page.items)
    emit(fmt, {"items": items, "next_cursor": page.next_cursor},
         lambda: calendars_table(items))


@calendars.command("get")
@click.argument("calendar_id")
@client_command
def calendars_get(client: CronmanClient, fmt: str, calendar_id: str) -> None:
    """One calendar (-o yaml: every date)."""
    found = client.get_calendar(calendar_id)
    emit(fmt, found, lambda: calendars_table([found]))


@calendars.command("create")
@click.option("-f", "--file", "path", required=True,
              help="JSON or YAML: {namespace, name, timezone, dates} ('-': stdin)")
@click.option("--namespace", "-n", default=None, help="for a calendar that names none")
@client_command
def calendars_create(client: CronmanClient, fmt: str, path: str,
                     namespace: str | None) -> None:
    """Create a calendar."""
    spec = _calendar_file(path)
    if namespace is not None:
        spec.setdefault("namespace", namespace)
    made = client.create_calendar(spec)
    emit(fmt, made, lambda: calendars_table([made]))


@calendars.command("update")
@click.argument("calendar_id")
@click.option("-f", "--file", "path", required=True,
              help="JSON or YAML: the whole calendar ('-': stdin)")
@click.option("--if-version", type=int, default=None,
              help="refuse unless the calendar is at this version")
@client_command
def calendars_update(client: CronmanClient, fmt: str, calendar_id: str, path: str,
                     if_version: int | None) -> None:
    """Replace a calendar."""
    spec = _calendar_file(path)
    version = if_version if if_version is not None else spec.pop("version", None)
    made = client.replace_calendar(calendar_id, spec, version=version)
    emit(fmt, made, lambda: calendars_table([made]))


@calendars.command("delete")
@click.argument("calendar_id")
@click.option("--force", is_flag=True, help="even though jobs name it (they then fire on "
                                            "its dates)")
@client_command
def calendars_delete(client: CronmanClient, fmt: str, calendar_id: str, force: bool) -> None:
    """Delete a calendar."""
    client.delete_calendar(calendar_id, force=force)
    emit(fmt, {"deleted": calendar_id}, lambda: f"deleted {calendar_id}")
