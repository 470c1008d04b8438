"""``cronman jobs ...`` and ``cronman cluster``: a client of the HTTP API.

Standard library only (urllib). ``--url`` / CRONMAN_URL and ``--token`` /
CRONMAN_TOKEN; aligned tables by default, the API's JSON with ``--json``. An
error prints the API's message (and field) and exits non-zero: 1 for a
refused request, 3 when the API cannot be reached or is unavailable.
"""

from __future__ import annotations

import functools
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, cli

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    @property
    def exit_code(self) -> int:
        return RET_UNAVAILABLE if self.status in (0, 502, 503, 504) else RET_ERROR

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        status = f"HTTP {self.status}: " if self.status else ""
        return f"{status}{self.message}{where}"


@dataclass
class ApiClient:
    url: str = DEFAULT_URL
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def request(self, method: str, path: str, body: Any = None,
                query: Sequence[tuple[str, str]] | None = None) -> Any:
        """The decoded JSON answer (None for 204); raises ``ApiError``."""
        url = self.url.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw.strip() else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                err = json.loads(raw)["error"]
                raise ApiError(exc.code, err.get("code", "error"),
                               err.get("message", exc.reason), err.get("field")) from None
            except (ValueError, KeyError, TypeError):
                raise ApiError(exc.code, "error", str(exc.reason)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, "unreachable", f"cannot reach {self.url}: {reason}") from None
        except ValueError as exc:
            raise ApiError(0, "bad_answer", f"the API answered with invalid JSON: {exc}") from None


# -- output ------------------------------------------------------------------


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


def schedule_text(schedule: dict[str, Any]) -> str:
    kind = schedule.get("kind")
    if kind == "cron":
        tz = schedule.get("timezone") or "UTC"
        return f"cron {schedule.get('cron')} ({tz})"
    if kind == "interval":
        return f"every {schedule.get('every')}s"
    if kind == "once":
        return f"once at {schedule.get('at')}"
    return json.dumps(schedule)


def target_text(target: dict[str, Any]) -> str:
    kind = target.get("kind")
    if kind == "http":
        return f"{target.get('method', 'POST')} {target.get('url')}"
    if kind == "sqs":
        return f"sqs {target.get('queue_url')}"
    if kind == "container":
        return f"container {target.get('image')}"
    return str(kind)


def jobs_table(jobs: Sequence[dict[str, Any]]) -> str:
    return format_table(
        ("ID", "NAMESPACE", "NAME", "SCHEDULE", "TARGET", "PAUSED", "NEXT FIRE"),
        [(j["id"], j["namespace"], j["name"], schedule_text(j["schedule"]),
          target_text(j["target"]), j["paused"], j.get("next_fire_at")) for j in jobs])


def job_details(job: dict[str, Any]) -> str:
    rows = [(key, value) for key, value in job.items() if key != "last_run"]
    text = format_table(("FIELD", "VALUE"), rows)
    last = job.get("last_run")
    if last is not None:
        text += "\n\nLast run\n" + runs_table([last])
    return text


def runs_table(runs: Sequence[dict[str, Any]]) -> str:
    return format_table(
        ("RUN ID", "SCHEDULED FOR", "STATUS", "ATTEMPT", "ORIGIN", "NODE", "LATENESS MS",
         "DURATION MS", "ERROR"),
        [(r["id"], r["scheduled_for"], r["status"], r["attempt"], r.get("origin"),
          r.get("node_id"), r.get("lateness_ms"), r.get("duration_ms"),
          _short(r.get("error"))) for r in runs])


def cluster_text(cluster: dict[str, Any]) -> str:
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


def emit(as_json: bool, payload: Any, render: Callable[[], str]) -> None:
    if as_json:
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        click.echo(render())


# -- commands ----------------------------------------------------------------


def client_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --token, --json; the command gets ``client`` and ``as_json``."""

    @click.option("--url", envvar="CRONMAN_URL", default=DEFAULT_URL, show_default=True,
                  help="the API's base URL [env CRONMAN_URL]")
    @click.option("--token", envvar="CRONMAN_TOKEN", default=None,
                  help="API token [env CRONMAN_TOKEN]")
    @click.option("--json", "as_json", is_flag=True, help="print the API's JSON")
    @functools.wraps(func)
    def wrapper(url: str, token: str | None, as_json: bool, **kwargs: Any) -> None:
        client = ApiClient(url=url, token=token or None)
        try:
            func(client=client, as_json=as_json, **kwargs)
        except ApiError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


@cli.group("jobs")
def jobs() -> None:
    """Create, list and manage jobs through the API."""


def _read_spec(path: str) -> Any:
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise click.BadParameter(str(exc), param_hint="-f") from None
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="-f") from None


@jobs.command("create")
@click.option("-f", "--file", "path", required=True,
              help="a JSON file with one job, a list of jobs or {\"jobs\": [...]} ('-': stdin)")
@client_options
def jobs_create(client: ApiClient, as_json: bool, path: str) -> None:
    """Create one job, or several at once (all or nothing)."""
    spec = _read_spec(path)
    if isinstance(spec, list):
        spec = {"jobs": spec}
    if isinstance(spec, dict) and set(spec) == {"jobs"}:
        answer = client.request("POST", "/v1/jobs/bulk", spec)
        emit(as_json, answer, lambda: jobs_table(answer["items"]))
        return
    job = client.request("POST", "/v1/jobs", spec)
    emit(as_json, job, lambda: jobs_table([job]))


@jobs.command("list")
@click.option("--namespace", default=None)
@click.option("--label", "labels", multiple=True, help="key:value (repeatable)")
@click.option("--paused", type=click.Choice(["true", "false"]), default=None)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--all", "follow", is_flag=True, help="follow next_cursor to the end")
@client_options
def jobs_list(client: ApiClient, as_json: bool, namespace: str | None,
              labels: tuple[str, ...], paused: str | None, limit: int, follow: bool) -> None:
    """List jobs."""
    query: list[tuple[str, str]] = [("limit", str(limit))]
    if namespace:
        query.append(("namespace", namespace))
    query += [("label", label) for label in labels]
    if paused:
        query.append(("paused", paused))
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = client.request("GET", "/v1/jobs",
                              query=query + ([("cursor", cursor)] if cursor else []))
        items += page["items"]
        cursor = page.get("next_cursor")
        if not follow or not cursor:
            break
        if sys.stderr.isatty():
            click.echo(f"\rfetched {len(items)} jobs…", err=True, nl=False)
    if follow and sys.stderr.isatty():
        click.echo("\r" + " " * 40 + "\r", err=True, nl=False)
    payload = {"items": items, "next_cursor": cursor}
    emit(as_json, payload, lambda: jobs_table(items))
    if cursor and not as_json:
        click.echo(f"(more jobs: use --all; next cursor {cursor})", err=True)


@jobs.command("get")
@click.argument("job_id")
@client_options
def jobs_get(client: ApiClient, as_json: bool, job_id: str) -> None:
    """Show one job and its last run."""
    job = client.request("GET", f"/v1/jobs/{_q(job_id)}")
    emit(as_json, job, lambda: job_details(job))


@jobs.command("runs")
@click.argument("job_id")
@click.option("--status", "statuses", multiple=True, help="a status (repeatable)")
@click.option("--since", default=None, help="RFC 3339")
@click.option("--until", default=None, help="RFC 3339")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@client_options
def jobs_runs(client: ApiClient, as_json: bool, job_id: str, statuses: tuple[str, ...],
              since: str | None, until: str | None, limit: int) -> None:
    """A job's runs, newest first."""
    query = [("limit", str(limit))] + [("status", s) for s in statuses]
    if since:
        query.append(("since", since))
    if until:
        query.append(("until", until))
    page = client.request("GET", f"/v1/jobs/{_q(job_id)}/runs", query=query)
    emit(as_json, page, lambda: runs_table(page["items"]))


def _job_action(name: str, verb: str) -> None:
    @jobs.command(name, help=f"{verb.capitalize()} a job.")
    @click.argument("job_id")
    @client_options
    def command(client: ApiClient, as_json: bool, job_id: str) -> None:
        job = client.request("POST", f"/v1/jobs/{_q(job_id)}/{name}")
        emit(as_json, job, lambda: jobs_table([job]))


_job_action("pause", "pause")
_job_action("resume", "resume")


@jobs.command("trigger")
@click.argument("job_id")
@client_options
def jobs_trigger(client: ApiClient, as_json: bool, job_id: str) -> None:
    """Fire a job once now, outside its schedule."""
    run = client.request("POST", f"/v1/jobs/{_q(job_id)}/trigger")
    emit(as_json, run, lambda: runs_table([run]))


@jobs.command("delete")
@click.argument("job_id")
@client_options
def jobs_delete(client: ApiClient, as_json: bool, job_id: str) -> None:
    """Delete a job."""
    client.request("DELETE", f"/v1/jobs/{_q(job_id)}")
    emit(as_json, {"deleted": job_id}, lambda: f"deleted {job_id}")


@cli.command("cluster")
@client_options
def cluster(client: ApiClient, as_json: bool) -> None:
    """The scheduler nodes (membership table) and worker agents."""
    answer = client.request("GET", "/v1/cluster")
    emit(as_json, answer, lambda: cluster_text(answer))


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")
