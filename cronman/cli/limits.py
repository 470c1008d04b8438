"""``cronman limits``, ``cronman quotas`` and ``cronman forecast``, through the API.

    cronman limits create -f billing.yaml     # {name, match: {host: ...}, rate, concurrency}
    cronman limits list
    cronman limits delete billing
    cronman quotas set pay --max-jobs 500 --concurrent-runs 20
    cronman forecast --from now --to +1h      # the busiest seconds ahead

Limits and setting quotas need an admin token (--token / CRONMAN_TOKEN).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from cronman.cli.documents import DocumentError, load_definitions
from cronman.cli.group import cli
from cronman.cli.options import client_command
from cronman.cli.output import emit, format_table
from cronman.client import CronmanClient


def _bounds(item: Mapping[str, Any]) -> str:
    parts = []
    if item.get("rate") is not None:
        parts.append(f"{item['rate']:g}/s" + (f" burst {item['burst']}"
                                              if item.get("burst") else ""))
    if item.get("concurrency") is not None:
        parts.append(f"{item['concurrency']} at once")
    return ", ".join(parts)


def limits_table(items: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for item in items:
        ((kind, value),) = item["match"].items()
        rows.append((item["name"], f"{kind}={value}", _bounds(item), item.get("version")))
    return format_table(("NAME", "MATCH", "ALLOWS", "VERSION"), rows)


def _limit_files(paths: Sequence[str]) -> list[dict[str, Any]]:
    try:
        found = load_definitions(paths)
    except DocumentError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None
    return [dict(d.spec) for d in found]


@cli.group("limits")
def limits() -> None:
    """Limits per destination, held cluster-wide (admin tokens).

    A limit matches the host of an http target, the queue of an sqs
    target, a job label (key:value) or a namespace, and allows a rate
    (starts a second, optionally a burst) and/or a concurrency (attempts in
    flight). Fires over a limit wait, highest priority first, within their
    misfire grace. Nodes read the limits every sync poll (2 s by default).
    """


@limits.command("list")
@client_command
def limits_list(client: CronmanClient, fmt: str) -> None:
    """Every limit."""
    items = client.list_limits()
    emit(fmt, {"items": items}, lambda: limits_table(items))


@limits.command("get")
@click.argument("name")
@client_command
def limits_get(client: CronmanClient, fmt: str, name: str) -> None:
    """One limit."""
    found = client.get_limit(name)
    emit(fmt, found, lambda: limits_table([found]))


@limits.command("create")
@click.option("-f", "--file", "paths", multiple=True, required=True,
              help="JSON or YAML: {name, match, rate, burst, concurrency}; several documents "
                   "make several limits ('-': stdin)")
@click.option("--replace", is_flag=True,
              help="replace a limit of the same name instead of refusing it (apply the files)")
@client_command
def limits_create(client: CronmanClient, fmt: str, paths: tuple[str, ...],
                  replace: bool) -> None:
    """Make limits (a name taken is refused, unless --replace)."""
    specs = _limit_files(paths)
    existing = {item["name"] for item in client.list_limits()} if replace else set()
    made = []
    for spec in specs:
        name = spec.get("name")
        if isinstance(name, str) and name in existing:
            made.append(client.replace_limit(name, {k: v for k, v in spec.items()
                                                    if k != "version"}))
        else:
            made.append(client.create_limit(spec))
    emit(fmt, {"items": made}, lambda: limits_table(made))


@limits.command("delete")
@click.argument("names", nargs=-1, required=True)
@client_command
def limits_delete(client: CronmanClient, fmt: str, names: tuple[str, ...]) -> None:
    """Delete limits."""
    for name in names:
        client.delete_limit(name)
    emit(fmt, {"deleted": list(names)}, lambda: "deleted " + ", ".join(names))


def quota_table(q: Mapping[str, Any]) -> str:
    return format_table(("NAMESPACE", "MAX JOBS", "FIRES/S", "BURST", "CONCURRENT RUNS"),
                        [(q["namespace"], q.get("max_jobs"), q.get("fires_per_second"),
                          q.get("burst"), q.get("concurrent_runs"))])


@cli.group("quotas")
def quotas() -> None:
    """A namespace's quota: max jobs (refused at create), fires per second and
    concurrent runs (held cluster-wide as the limit quota:<namespace>)."""


@quotas.command("show")
@click.argument("namespace")
@client_command
def quotas_show(client: CronmanClient, fmt: str, namespace: str) -> None:
    """The namespace's quota."""
    found = client.quota(namespace)
    emit(fmt, found, lambda: quota_table(found))


@quotas.command("set")
@click.argument("namespace")
@click.option("--max-jobs", type=int, default=None)
@click.option("--fires-per-second", type=float, default=None)
@click.option("--burst", type=int, default=None)
@click.option("--concurrent-runs", type=int, default=None)
@client_command
def quotas_set(client: CronmanClient, fmt: str, namespace: str, max_jobs: int | None,
               fires_per_second: float | None, burst: int | None,
               concurrent_runs: int | None) -> None:
    """Set the namespace's quota: the bounds given (the others unbounded; admin tokens)."""
    body = {k: v for k, v in (("max_jobs", max_jobs), ("fires_per_second", fires_per_second),
                              ("burst", burst), ("concurrent_runs", concurrent_runs))
            if v is not None}
    made = client.put_quota(namespace, body)
    emit(fmt, made, lambda: quota_table(made))


@quotas.command("delete")
@click.argument("namespace")
@client_command
def quotas_delete(client: CronmanClient, fmt: str, namespace: str) -> None:
    """Drop the namespace's quota (admin tokens)."""
    client.delete_quota(namespace)
    emit(fmt, {"deleted": namespace}, lambda: f"quota of {namespace} dropped")


def forecast_table(body: Mapping[str, Any]) -> str:
    def top(counts: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {n}" for k, n in list(counts.items())[:3])

    lines = [f"{body['fires']} fires of {body['jobs']} jobs from {body['from']} to "
             f"{body['to']}" + (" (jobs truncated)" if body.get("jobs_truncated") else "")]
    lines.append(format_table(("SECOND", "FIRES", "NAMESPACES", "HOSTS"),
                              [(s["at"], s["fires"], top(s["namespaces"]), top(s["hosts"]))
                               for s in body["seconds"]]))
    if body["limits"]:
        lines.append("")
        lines.append(format_table(
            ("LIMIT", "FIRES", "PEAK/S", "RATE", "SECONDS HELD", "MAX WAITING"),
            [(x["name"], x["fires"], x["peak_per_second"], x["rate"], x["seconds_held"],
              x["max_waiting"]) for x in body["limits"]]))
    return "\n".join(lines)


@cli.command("forecast")
@click.option("--from", "since", default=None, help="RFC 3339, now, +1h, -10m (default now)")
@click.option("--to", "until", default=None, help="default: an hour after --from (at most 24 h)")
@click.option("--namespace", "-n", default=None)
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True)
@client_command
def forecast(client: CronmanClient, fmt: str, since: str | None, until: str | None,
             namespace: str | None, top: int) -> None:
    """The busiest seconds ahead, and where limits would hold fires back."""
    body = client.forecast(since=since, until=until, namespace=namespace, top=top)
    emit(fmt, body, lambda: forecast_table(body))
