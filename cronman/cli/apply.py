"""``cronman jobs apply -f FILE|DIR``: make the API's jobs (and limits) match
definition files.

See :mod:`cronman.apply` for how jobs are matched, compared and pruned, and
:mod:`cronman.apply.limits` for limits (a document with ``match``). A dry
run also shows the herd forecast of what it would apply (``POST
/v1/forecast`` with the plan as its proposal).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import click

from cronman.apply import Plan, Result, execute, make_plan
from cronman.apply.execute import DEFAULT_PARALLEL
from cronman.apply.labels import managed_filter
from cronman.apply.limits import (
    LimitChange,
    LimitOutcome,
    LimitPlan,
    execute_limits,
    is_limit,
    make_limit_plan,
)
from cronman.apply.plan import Change, desired_definitions
from cronman.cli.documents import DocumentError, load_definitions
from cronman.cli.group import RET_ERROR
from cronman.cli.jobs import jobs
from cronman.cli.limits import forecast_table
from cronman.cli.options import MAX_PARALLEL, client_command, progress
from cronman.cli.output import to_json, to_yaml
from cronman.client import PAGE_MAX, ApiError, CronmanClient, Job
from cronman.vocabulary import DEFAULT_NAMESPACE

MAX_ERRORS_SHOWN = 50
FORECAST_TOP = 5  # busiest seconds a dry run lists


@jobs.command("apply")
@click.option("-f", "--file", "paths", multiple=True, required=True,
              help="a JSON or YAML file (one job, a list, or several YAML documents) or a "
                   "folder of them (repeatable; '-': stdin)")
@click.option("-R", "--recursive", is_flag=True, help="read sub-folders too")
@click.option("-n", "--namespace", "default_namespace", default=DEFAULT_NAMESPACE,
              show_default=True, help="namespace of definitions that name none")
@click.option("--dry-run", is_flag=True,
              help="show what would change (a diff) and the herd forecast of it; change nothing")
@click.option("--forecast-to", default="+1h", show_default=True,
              help="with --dry-run: how far ahead the forecast counts (at most +24h)")
@click.option("--no-forecast", is_flag=True, help="with --dry-run: leave the forecast out")
@click.option("--prune", is_flag=True,
              help="delete the jobs apply manages in the definitions' namespaces that no "
                   "definition names (jobs made by hand are never deleted), and, when the "
                   "files define limits, the limits apply manages that none names")
@click.option("--prune-limits", is_flag=True,
              help="with --prune: prune the limits apply manages even if no file defines one")
@click.option("--prune-namespace", "prune_namespaces", multiple=True,
              help="also prune this namespace, even if no definition names it (repeatable)")
@click.option("-l", "--selector", "selector", multiple=True, metavar="KEY:VALUE",
              help="prune only jobs that also carry this label (repeatable)")
@click.option("--parallel", type=click.IntRange(1, MAX_PARALLEL), default=DEFAULT_PARALLEL,
              show_default=True, help="requests in flight at once")
@click.option("-q", "--quiet", is_flag=True, help="print the summary only")
@client_command
def jobs_apply(client: CronmanClient, fmt: str, paths: tuple[str, ...], recursive: bool,
               default_namespace: str, dry_run: bool, forecast_to: str, no_forecast: bool,
               prune: bool, prune_limits: bool, prune_namespaces: tuple[str, ...],
               selector: tuple[str, ...], parallel: int, quiet: bool) -> None:
    """Create or update jobs (and limits) so that they match the definitions;
    idempotent.

    Jobs are matched by namespace + name, limits (documents with a match
    key; admin tokens) by name. A second apply of the same files changes
    nothing. Updates carry the version that was compared: a job or limit
    changed by someone else meanwhile is refused (conflict), not overwritten.
    """
    if (prune_namespaces or prune_limits) and not prune:
        raise click.UsageError("--prune-namespace and --prune-limits need --prune")
    labels = _selector(selector)
    try:
        definitions = load_definitions(paths, recursive=recursive)
    except DocumentError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None
    limit_defs = [(d.source, d.spec) for d in definitions if is_limit(d.spec)]
    desired, errors = desired_definitions(((d.source, d.spec) for d in definitions
                                           if not is_limit(d.spec)),
                                          default_namespace=default_namespace)
    namespaces = sorted({d.namespace for d in desired} | set(prune_namespaces))
    live = _live_jobs(client, namespaces)
    plan = make_plan(desired, live, prune_namespaces=namespaces if prune else (),
                     prune_selector=labels)
    live_limits = client.list_limits() if limit_defs or prune_limits else None
    limit_plan = (None if live_limits is None
                  else make_limit_plan(limit_defs, live_limits, prune=prune))
    if errors or plan.errors or (limit_plan is not None and limit_plan.errors):
        _refuse([*errors, *plan.errors, *(limit_plan.errors if limit_plan else [])])
    if dry_run:
        forecast = None if no_forecast else _forecast(client, plan, limit_plan,
                                                      live_limits or [], forecast_to)
        _show_plan(plan, limit_plan, forecast, fmt, quiet)
        return
    limit_changes = limit_plan.changes if limit_plan is not None else []
    with progress(len(plan.changes) + len(limit_changes), "applying") as bar:
        # Limits first (a new limit holds the new jobs' first fires), their deletes last.
        limit_outcomes = execute_limits(client, [c for c in limit_changes
                                                 if c.action != "delete"])
        bar.advance(len(limit_outcomes))
        result = execute(client, plan, parallel=parallel, progress=bar.advance)
        limit_outcomes += execute_limits(client, [c for c in limit_changes
                                                  if c.action == "delete"])
    _show_result(result, limit_outcomes, fmt, quiet)
    if result.failed or any(not o.ok for o in limit_outcomes):
        sys.exit(RET_ERROR)


def _forecast(client: CronmanClient, plan: Plan, limit_plan: LimitPlan | None,
              live_limits: list[dict[str, Any]], until: str) -> dict[str, Any]:
    """The herd forecast of the cluster as the plan would leave it (or, the
    API refusing it, ``{"error": ...}``: the dry run still shows the plan)."""
    proposal: dict[str, Any] = {
        "jobs": [*(c.spec for c in plan.creates),
                 *({**(c.spec or {}), "id": c.live["id"]} for c in plan.updates if c.live)],
        "delete_jobs": [c.live["id"] for c in plan.deletes if c.live],
    }
    if limit_plan is not None:
        proposal["limits"] = limit_plan.after(live_limits)
    try:
        return client.forecast_proposal(proposal, until=until, top=FORECAST_TOP)
    except ApiError as exc:
        return {"error": str(exc)}


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


def _change_json(change: Change | LimitChange, kind: str) -> dict[str, Any]:
    return {"kind": kind, "action": change.action, "namespace": change.namespace,
            "name": change.name, "source": change.source, "fields": list(change.fields),
            "diff": change.diff()}


def _show_plan(plan: Plan, limit_plan: LimitPlan | None, forecast: dict[str, Any] | None,
               fmt: str, quiet: bool) -> None:
    limit_changes = limit_plan.changes if limit_plan is not None else []
    if fmt in ("json", "yaml"):
        payload = {"dry_run": True,
                   "changes": [*(_change_json(c, "limit") for c in limit_changes),
                               *(_change_json(c, "job") for c in plan.changes)],
                   "unchanged": len(plan.unchanged),
                   "limits_unchanged": len(limit_plan.unchanged) if limit_plan else None,
                   "forecast": forecast}
        click.echo(to_json(payload) if fmt == "json" else to_yaml(payload))
        return
    if not quiet:
        shown: list[Change | LimitChange] = [*limit_changes, *plan.changes]
        for change in shown:
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
    if forecast is not None:
        _show_forecast(forecast)
    if limit_plan is not None:
        click.echo(f"dry run: {limit_plan.summary()}")
    if plan.changes or limit_changes:
        click.echo(f"dry run: {plan.summary()}; nothing was changed")
    else:
        click.echo(f"dry run: no changes ({len(plan.unchanged)} jobs unchanged)")


def _show_forecast(forecast: dict[str, Any]) -> None:
    if "error" in forecast:
        click.echo(f"forecast: not shown ({forecast['error']})", err=True)
        return
    click.echo("forecast once applied:")
    click.echo(_indent(forecast_table(forecast)))
    for row in forecast["held"][:FORECAST_TOP]:
        click.echo(f"    {row['at']}: limit {row['limit']} holds back {row['waiting']} "
                   f"({row['arriving']} arriving, {row['allowed']:g} allowed)")


def _show_result(result: Result, limit_outcomes: list[LimitOutcome], fmt: str,
                 quiet: bool) -> None:
    outcomes: list[Any] = [*limit_outcomes, *result.outcomes]
    if fmt in ("json", "yaml"):
        payload = {"changes": [{"kind": "limit" if isinstance(o, LimitOutcome) else "job",
                                "action": o.change.action, "status": o.status,
                                "namespace": o.change.namespace, "name": o.change.name,
                                "source": o.change.source, "id": o.job_id,
                                "error": None if o.error is None else str(o.error)}
                               for o in outcomes],
                   "unchanged": result.unchanged}
        click.echo(to_json(payload) if fmt == "json" else to_yaml(payload))
    else:
        for o in outcomes:
            if o.ok and quiet:
                continue
            line = f"{o.status} {o.change.key}"
            if o.change.action == "update" and o.ok:
                line += f" ({', '.join(o.change.fields)})"
            if o.error is not None:
                line += f": {o.error}"
            click.echo(line, err=not o.ok)
        if limit_outcomes:
            counts = Counter(o.status for o in limit_outcomes)
            click.echo("limits: " + ", ".join(f"{n} {status}" for status, n in
                                              sorted(counts.items())))
        if result.outcomes:
            click.echo(result.summary())
        else:
            click.echo(f"no changes: {result.unchanged} jobs unchanged")
    if result.count("conflict") or any(o.status == "conflict" for o in limit_outcomes):
        click.echo("conflicts: these changed since they were read; apply again to "
                   "bring them to the files' definitions", err=True)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


__all__ = ["jobs_apply", "managed_filter"]
