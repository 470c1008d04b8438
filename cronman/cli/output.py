"""How the client commands print: ``-o table`` (default), ``wide``, ``json``, ``yaml``.

Tables are aligned columns (numbers right-aligned, "-" for nothing); json
and yaml print the API's answer unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import click
import yaml

FORMATS = ("table", "wide", "json", "yaml")


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns aligned to their widest cell; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    numeric = []
    for i in range(len(headers)):
        values = [r[i] for r in cells if r[i] != "-"]
        numeric.append(bool(values) and all(_is_number(text) for text in values))

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i])
                 for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def to_json(payload: Any) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False)


def to_yaml(payload: Any) -> str:
    text: str = yaml.safe_dump(payload, sort_keys=False, allow_unicode=True,
                               default_flow_style=False)
    return text.rstrip("\n")


def emit(fmt: str, payload: Any, table: Callable[[], str],
         wide: Callable[[], str] | None = None) -> None:
    """Print ``payload`` in ``fmt``; ``table``/``wide`` render the human forms."""
    if fmt == "json":
        click.echo(to_json(payload))
    elif fmt == "yaml":
        click.echo(to_yaml(payload))
    elif fmt == "wide" and wide is not None:
        click.echo(wide())
    else:
        click.echo(table())


# -- jobs, runs, cluster -----------------------------------------------------


def schedule_text(schedule: Mapping[str, Any]) -> str:
    kind = schedule.get("kind")
    if kind == "cron":
        tz = schedule.get("timezone") or "UTC"
        return f"cron {schedule.get('cron')} ({tz})"
    if kind == "interval":
        return f"every {schedule.get('every')}s"
    if kind == "once":
        return f"once at {schedule.get('at')}"
    return json.dumps(schedule)


def target_text(target: Mapping[str, Any]) -> str:
    kind = target.get("kind")
    if kind == "http":
        return f"{target.get('method', 'POST')} {target.get('url')}"
    if kind == "sqs":
        return f"sqs {target.get('queue_url')}"
    if kind == "container":
        return f"container {target.get('image')}"
    return str(kind)


def labels_text(labels: Mapping[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (labels or {}).items())


def jobs_table(jobs: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "NAMESPACE", "NAME", "SCHEDULE", "TARGET", "PAUSED", "NEXT FIRE"),
        [(j["id"], j["namespace"], j["name"], schedule_text(j["schedule"]),
          target_text(j["target"]), j["paused"], j.get("next_fire_at")) for j in jobs])


def jobs_wide(jobs: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "NAMESPACE", "NAME", "SCHEDULE", "TARGET", "PAUSED", "NEXT FIRE", "VERSION",
         "RETRY", "MISFIRE", "DELIVERY", "CONCURRENCY", "PRIORITY", "UPDATED", "LABELS",
         "STATE", "RUNS LEFT", "PAUSE REASON"),
        [(j["id"], j["namespace"], j["name"], schedule_text(j["schedule"]),
          target_text(j["target"]), j["paused"], j.get("next_fire_at"), j.get("version"),
          _retry_text(j.get("retry")), _misfire_text(j.get("misfire")), j.get("delivery"),
          j.get("concurrency"), j.get("priority"), j.get("updated_at"),
          labels_text(j.get("labels")), j.get("state"), j.get("runs_left"),
          j.get("pause_reason") or j.get("pause_note")) for j in jobs])


def _retry_text(retry: Mapping[str, Any] | None) -> str | None:
    if not retry:
        return None
    return (f"{retry.get('max_attempts')}x {retry.get('min_backoff')}"
            f"-{retry.get('max_backoff')}s")


def _misfire_text(misfire: Mapping[str, Any] | None) -> str | None:
    if not misfire:
        return None
    return f"{misfire.get('policy')}/{misfire.get('grace')}s"


def job_details(job: Mapping[str, Any]) -> str:
    rows = [(key, value) for key, value in job.items() if key != "last_run"]
    text = format_table(("FIELD", "VALUE"), rows)
    last = job.get("last_run")
    if last is not None:
        text += "\n\nLast run\n" + runs_table([last])
    return text


def gate_text(gate: Mapping[str, Any] | None) -> str | None:
    """What gated a run, in a few words (``Run.gate``)."""
    if not gate:
        return None
    parts = []
    held = gate.get("limit")
    if isinstance(held, Mapping):
        waited = held.get("waited_ms")
        parts.append(f"limit {held.get('name')}"
                     + (f" {waited / 1000:.1f} s" if waited is not None else " (waiting)"))
    if gate.get("upstream"):
        parts.append(f"after {len(gate['upstream'])} upstream run(s)")
    if gate.get("calendar"):
        parts.append(f"calendar {gate['calendar']}")
    if gate.get("waiting_for") and "waited_ms" not in gate and "stale" not in gate:
        parts.append(f"waiting for {len(gate['waiting_for'])} upstream job(s)")
    if gate.get("waited_ms") is not None:
        parts.append(f"waited {gate['waited_ms'] / 1000:.1f} s")
    if gate.get("buffered"):
        parts.append(f"buffered behind {len(gate['buffered'].get('behind') or ())} run(s)")
    if gate.get("stale"):
        parts.append(f"stale: {len(gate['stale'])} upstream job(s)")
    elif gate.get("depends_on"):
        parts.append(f"{len(gate['depends_on'])} upstream(s) fresh")
    return "; ".join(parts) or None


def runs_table(runs: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("RUN ID", "SCHEDULED FOR", "STATUS", "ATTEMPT", "ORIGIN", "NODE", "LATENESS MS",
         "DURATION MS", "GATE", "ERROR"),
        [(r["id"], r["scheduled_for"], r["status"], r["attempt"], r.get("origin"),
          r.get("node_id"), r.get("lateness_ms"), r.get("duration_ms"),
          gate_text(r.get("gate")), _short(r.get("error"))) for r in runs])


def runs_wide(runs: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("RUN ID", "JOB ID", "SCHEDULED FOR", "STATUS", "ATTEMPT", "ORIGIN", "NODE",
         "CLAIMED", "STARTED", "FINISHED", "NEXT ATTEMPT", "LATENESS MS", "DURATION MS",
         "SKIPPED BEFORE", "RESULT", "GATE", "ERROR"),
        [(r["id"], r.get("job_id"), r["scheduled_for"], r["status"], r["attempt"],
          r.get("origin"), r.get("node_id"), r.get("claimed_at"), r.get("started_at"),
          r.get("finished_at"), r.get("next_attempt_at"), r.get("lateness_ms"),
          r.get("duration_ms"), r.get("skipped_before"), r.get("result"), r.get("gate"),
          r.get("error")) for r in runs])


def job_text(run: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of a run's job (a run across jobs); None when the job is gone."""
    if run.get("job_name") is None:
        return None
    return f"{run.get('namespace')}/{run['job_name']}"


def run_items_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Runs across jobs (``GET /v1/runs``): each with its job."""
    return format_table(
        ("RUN ID", "JOB", "SCHEDULED FOR", "STATUS", "ATTEMPT", "ORIGIN", "LATENESS MS",
         "DURATION MS", "ERROR"),
        [(r["id"], job_text(r), r["scheduled_for"], r["status"], r["attempt"],
          r.get("origin"), r.get("lateness_ms"), r.get("duration_ms"),
          _short(r.get("error"))) for r in runs])


def run_items_wide(runs: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("RUN ID", "NAMESPACE", "JOB", "JOB ID", "SCHEDULED FOR", "STATUS", "ATTEMPT",
         "ORIGIN", "NODE", "CLAIMED", "STARTED", "FINISHED", "NEXT ATTEMPT", "LATENESS MS",
         "DURATION MS", "SKIPPED BEFORE", "RESULT", "ERROR"),
        [(r["id"], r.get("namespace"), r.get("job_name"), r.get("job_id"), r["scheduled_for"],
          r["status"], r["attempt"], r.get("origin"), r.get("node_id"), r.get("claimed_at"),
          r.get("started_at"), r.get("finished_at"), r.get("next_attempt_at"),
          r.get("lateness_ms"), r.get("duration_ms"), r.get("skipped_before"),
          r.get("result"), r.get("error")) for r in runs])


def history_table(entries: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("AT", "ACTION", "VERSION", "ACTOR", "REQUEST ID", "CHANGED"),
        [(e["at"], e["action"], e.get("job_version"), (e.get("actor") or {}).get("name"),
          e.get("request_id"), ",".join(e.get("changed") or []) or None) for e in entries])


def history_wide(entries: Sequence[Mapping[str, Any]]) -> str:
    return format_table(
        ("ID", "AT", "ACTION", "VERSION", "ACTOR", "TOKEN ID", "REQUEST ID", "CHANGED",
         "DETAILS"),
        [(e["id"], e["at"], e["action"], e.get("job_version"),
          (e.get("actor") or {}).get("name"), (e.get("actor") or {}).get("token_id"),
          e.get("request_id"), ",".join(e.get("changed") or []) or None, e.get("details"))
         for e in entries])


def run_details(run: Mapping[str, Any]) -> str:
    return format_table(("FIELD", "VALUE"), list(run.items()))


def cluster_text(cluster: Mapping[str, Any]) -> str:
    nodes = format_table(
        ("NODE", "ADDRESS", "STARTED", "HEARTBEAT AGE S", "OWNED JOBS", "FIRES/MIN",
         "LOCK WINS", "LOCK LOSSES"),
        [(n["id"], n.get("address"), n.get("started_at"), n.get("heartbeat_age_s"),
          n.get("owned_jobs"), n.get("fires_last_minute"), n.get("lock_wins"),
          n.get("lock_losses")) for n in cluster.get("nodes", [])])
    if not cluster.get("nodes"):
        nodes = "no live scheduler nodes"
    text = f"replicas: {cluster.get('replicas')}\n\n{nodes}"
    agents = cluster.get("agents") or []
    if agents:
        keys: list[str] = []
        for agent in agents:
            keys += [k for k in agent if k not in keys]
        text += "\n\n" + format_table([k.upper() for k in keys],
                                      [[a.get(k) for k in keys] for a in agents])
    else:
        text += "\n\nno worker agents"
    return text


def _short(text: Any, width: int = 60) -> Any:
    if isinstance(text, str):
        text = " ".join(text.split())
        if len(text) > width:
            return text[: width - 1] + "…"
    return text
