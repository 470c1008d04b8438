"""``cronman jobs apply -f FILE|DIR``: make the API's jobs match job definition files.

See :mod:`cronman.apply` for how jobs are matched, compared and pruned.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from cronman.apply import Plan, Result, execute, make_plan
from cronman.apply.execute import DEFAULT_PARALLEL
from cronman.apply.labels import managed_filter
from cronman.apply.plan import desired_definitions
from cronman.cli.documents import DocumentError, load_definitions
from cronman.cli.group import RET_ERROR
from cronman.cli.jobs import jobs
from cronman.cli.options import MAX_PARALLEL, client_command, progress
from cronman.cli.output import to_json, to_yaml
from cronman.client import PAGE_MAX, CronmanClient, Job
from cronman.vocabulary import DEFAULT_NAMESPACE

MAX_ERRORS_SHOWN = 50


@jobs.command("apply")
@click.option("-f", "--file", "paths", multiple=True, required=True,
              help="a JSON or YAML file (one job, a list, or several YAML documents) or a "
                   "folder of them (repeatable; '-': stdin)")
@click.option("-R", "--recursive", is_flag=True, help="read sub-folders too")
@click.option("-n", "--namespace", "default_namespace", default=DEFAULT_NAMESPACE,
              show_default=True, help="namespace of definitions that name none")
@click.option("--dry-run", is_flag=True, help="show what would change (a diff); change nothing")
@click.option("--prune", is_flag=True,
              help="delete the jobs apply manages in the definitions' namespaces that no "
                   "definition names (jobs made by hand are never deleted)")
@click.option("--prune-namespace", "prune_namespaces", multiple=True,
              help="also prune this namespace, even if no definition names it (repeatable)")
@click.option("-l", "--selector", "selector", multiple=True, metavar="KEY:VALUE",
              help="prune only jobs that also carry this label (repeatable)")
@click.option("--parallel", type=click.IntRange(1, MAX_PARALLEL), default=DEFAULT_PARALLEL,
              show_default=True, help="requests in flight at once")
@click.option("-q", "--quiet", is_flag=True, help="print the summary only")
@client_command
def jobs_apply(client: CronmanClient, fmt: str, paths: tuple[str, ...], recursive: bool,
               default_namespace: str, dry_run: bool, prune: bool,
               prune_namespaces: tuple[str, ...], selector: tuple[str, ...], parallel: int,
               quiet: bool) -> None:
    """Create or update jobs so that they match the definitions; idempotent.

    Jobs are matched by namespace + name. A second apply of the same files
    changes nothing. Updates carry the version that was compared: a job
    changed by someone else meanwhile is refused (conflict), not overwritten.
    """
    if prune_namespaces and not prune:
        raise click.UsageError("--prune-namespace needs --prune")
    labels = _selector(selector)
    try:
        definitions = load_definitions(paths, recursive=recursive)
    except DocumentError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None
    desired, errors = desired_definitions(((d.source, d.spec) for d in definitions),
                                          default_namespace=default_namespace)
    namespaces = sorted({d.namespace for d in desired} | set(prune_namespaces))
    live = _live_jobs(client, namespaces)
    plan = make_plan(desired, live, prune_namespaces=namespaces if prune else (),
                     prune_selector=labels)
    if errors or plan.errors:
        _refuse([*errors, *plan.errors])
    if dry_run:
        _show_plan(plan, fmt, quiet)
        return
    with progress(len(plan.changes), "applying") as bar:
        result = execute(client, plan, parallel=parallel, progress=bar.advance)
    _show_result(result, fmt, quiet)
    if result.failed:
        sys.exit(RET_ERROR)


def _selector(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for raw in values:
        key, sep, value = raw.partition(":")
        if not sep or not key:
            raise click.BadParameter(f"{raw!r} is not KEY:VALUE", param_hint="--selector")
        out[key] = value
    return out


def _live_jobs(client: CronmanClient, namespaces: list[str]) -> list[Job]:
    live: list[Job] = []
    for namespace in namespaces:
        live += client.iter_jobs(namespace=namespace, page_size=PAGE_MAX)
    return live


def _refuse(errors: list[Any]) -> None:
    for error in errors[:MAX_ERRORS_SHOWN]:
        click.echo(f"error: {error}", err=True)
    if len(errors) > MAX_ERRORS_SHOWN:
        click.echo(f"… and {len(errors) - MAX_ERRORS_SHOWN} more", err=True)
    click.echo(f"nothing was applied: {len(errors)} invalid definition"
               f"{'s' if len(errors) != 1 else ''}", err=True)
    sys.exit(RET_ERROR)


def _show_plan(plan: Plan, fmt: str, quiet: bool) -> None:
    if fmt in ("json", "yaml"):
        payload = {"dry_run": True,
                   "changes": [{"action": c.action, "namespace": c.namespace, "name": c.name,
                                "source": c.source, "fields": list(c.fields),
                                "diff": c.diff()} for c in plan.changes],
                   "unchanged": len(plan.unchanged)}
        click.echo(to_json(payload) if fmt == "json" else to_yaml(payload))
        return
    if not quiet:
        for change in plan.changes:
            if change.action == "create":
                click.echo(f"+ create {change.key} ({change.source})")
            elif change.action == "update":
                click.echo(f"~ update {change.key} ({change.source}): "
                           f"{', '.join(change.fields)}")
            else:
                click.echo(f"- delete {change.key} (managed by apply; no definition names it)")
            diff = change.diff()
            if diff:
                click.echo(_indent(diff))
    if plan.changes:
        click.echo(f"dry run: {plan.summary()}; nothing was changed")
    else:
        click.echo(f"dry run: no changes ({len(plan.unchanged)} jobs unchanged)")


def _show_result(result: Result, fmt: str, quiet: bool) -> None:
    if fmt in ("json", "yaml"):
        payload = {"changes": [{"action": o.change.action, "status": o.status,
                                "namespace": o.change.namespace, "name": o.change.name,
                                "source": o.change.source, "id": o.job_id,
                                "error": None if o.error is None else str(o.error)}
                               for o in result.outcomes],
                   "unchanged": result.unchanged}
        click.echo(to_json(payload) if fmt == "json" else to_yaml(payload))
    else:
        for o in result.outcomes:
            if o.ok and quiet:
                continue
            line = f"{o.status} {o.change.key}"
            if o.change.action == "update" and o.ok:
                line += f" ({', '.join(o.change.fields)})"
            if o.error is not None:
                line += f": {o.error}"
            click.echo(line, err=not o.ok)
        if result.outcomes:
            click.echo(result.summary())
        else:
            click.echo(f"no changes: {result.unchanged} jobs unchanged")
    if result.count("conflict"):
        click.echo("conflicts: these jobs changed since they were read; apply again to "
                   "bring them to the files' definitions", err=True)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


__all__ = ["jobs_apply", "managed_filter"]
