"""The operator console's API on SQLite and PostgreSQL: runs across jobs,
run statistics, the job list's search, read-only tokens and whoami,
membership changes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner

from cronman.cli import cli
from cronman.config import Settings
from cronman.coordination.base import NodeInfo
from cronman.coordination.memory import InProcessCoordinator
from cronman.ids import run_id_for
from cronman.models import Run, RunUpdate
from cronman.processes.api import make_app
from cronman.store.codec import encode_search_cursor
from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from tests.support.api import job_spec

SQS = {"kind": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q",
       "region": "us-east-1", "body": "x"}


@pytest.fixture
def clock():
    return [1000.0]


@pytest.fixture
def coordinator(clock):
    return InProcessCoordinator(ttl=30, clock=lambda: clock[0])


@pytest.fixture
def client(store, database_url, coordinator):
    app = make_app(Settings(database_url=database_url), store=store, coordinator=coordinator)
    return app.test_client()


def create(client, **overrides):
    resp = client.post("/v1/jobs", json=job_spec(**overrides))
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


def add_runs(store, job_id, items):
    """Claim runs at the given times as a node would, then write their outcomes."""
    runs = [Run(id=run_id_for(job_id, t), job_id=job_id, scheduled_for=t, status="claimed",
                attempt=1, node_id="sched-1", claimed_at=t, lease_expires_at=t)
            for t, _, _ in items]
    assert store.runs.claim_runs(runs) == {r.id for r in runs}
    store.runs.write_run_updates([
        RunUpdate(id=r.id, scheduled_for=r.scheduled_for, status=status, lateness_ms=late,
                  error="HTTP 500" if status == "failed" else None)
        for r, (_, status, late) in zip(runs, items, strict=True)])
    return [r.id for r in runs]


@pytest.fixture
def history(client, store):
    """Three jobs (billing: http x2, search: sqs) with runs over the last 3 hours."""
    now = utcnow().replace(microsecond=0)
    jobs = {
        "digest": create(client, name="digest", namespace="billing"),
        "invoice": create(client, name="invoice", namespace="billing"),
        "index": create(client, name="index", namespace="search", target=SQS),
    }
    runs = {}
    for k, (name, job) in enumerate(jobs.items()):
        items = []
        for m in range(0, 180, 10):
            # 30 s off the 10-minute marks: "-1h" at request time never falls on a run.
            t = now - timedelta(minutes=m, seconds=30 + k)
            status = "failed" if m % 30 == 0 else "lost" if m == 50 else "succeeded"
            items.append((t, status, m + k))
        for rid, item in zip(add_runs(store, job["id"], items), items, strict=True):
            runs[rid] = (name, *item)
    return {"jobs": jobs, "runs": runs, "now": now}


def pages(client, url, headers=None, limit=7):
    items, cursor = [], None
    while True:
        sep = "&" if "?" in url else "?"
        page_url = f"{url}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        resp = client.get(page_url, headers=headers or {})
        assert resp.status_code == 200, resp.get_json()
        body = resp.get_json()
        items.extend(body["items"])
        cursor = body["next_cursor"]
        if not cursor:
            return items


def test_runs_across_jobs_newest_first(client, history):
    items = pages(client, "/v1/runs")
    assert {i["id"] for i in items} == set(history["runs"])
    keys = [(i["scheduled_for"], i["id"]) for i in items]
    assert keys == sorted(keys, reverse=True)
    first = items[0]
    name = history["runs"][first["id"]][0]
    assert first["job_name"] == name
    assert first["namespace"] == history["jobs"][name]["namespace"]


def test_runs_filters(client, history):
    runs, jobs, now = history["runs"], history["jobs"], history["now"]

    def ids(query):
        return {i["id"] for i in pages(client, "/v1/runs?" + query)}

    def expect(pred):
        return {rid for rid, (name, t, status, _) in runs.items() if pred(name, t, status)}

    hour = now - timedelta(hours=1)
    failed_last_hour = ids("status=failed&since=-1h")
    assert failed_last_hour == expect(lambda n, t, s: s == "failed" and t >= hour)
    assert len(failed_last_hour) == 6  # minutes 0 and 30, three jobs
    assert ids("status=failed,lost") == expect(lambda n, t, s: s in ("failed", "lost"))
    assert ids("status=failed&status=lost") == ids("status=failed,lost")
    assert ids("namespace=search") == expect(lambda n, t, s: n == "index")
    assert ids("target_kind=sqs") == expect(lambda n, t, s: n == "index")
    assert ids("target_kind=http,container") == expect(lambda n, t, s: n != "index")
    assert ids(f"job={jobs['digest']['id']}") == expect(lambda n, t, s: n == "digest")
    two = f"job={jobs['digest']['id']}&job={jobs['index']['id']}"
    assert ids(two) == expect(lambda n, t, s: n in ("digest", "index"))
    since = format_rfc3339(now - timedelta(minutes=45))
    until = format_rfc3339(now - timedelta(minutes=15))
    assert ids(f"since={since}&until={until}") == expect(
        lambda n, t, s: now - timedelta(minutes=45) <= t < now - timedelta(minutes=15))
    assert ids("since=-2h&until=-1h") == expect(
        lambda n, t, s: now - timedelta(hours=2) <= t < now - timedelta(hours=1))
    assert ids("until=now&since=-1h30m") == ids("since=-90m")


def test_runs_bad_input_names_the_parameter(client, history):
    for query, field in (("status=done", "status"), ("since=yesterday", "since"),
                         ("until=-1y", "until"), ("since=-", "since"), ("job=xyz!", "job"),
                         ("target_kind=ftp", "target_kind"), ("limit=0", "limit"),
                         ("namespace=bad ns", "namespace"), ("cursor=zzzz", "cursor"),
                         ("sort=id", "sort")):
        assert error_of(client.get(f"/v1/runs?{query}"), 400)["field"] == field, query


def test_times_at_the_end_of_the_calendar_are_no_500(client, history):
    """Found by probing: until=9999-12-31T23:59:59.999999Z was an OverflowError
    (a 500) on PostgreSQL: an until beyond a day ahead is cut to it (no run is
    scheduled further ahead), and so is a cursor's time, wherever it points."""
    everything = {i["id"] for i in pages(client, "/v1/runs")}
    end = "9999-12-31T23:59:59.999999Z"
    assert {i["id"] for i in pages(client, f"/v1/runs?until={end}")} == everything
    assert client.get(f"/v1/runs?since={end}").get_json()["items"] == []
    assert client.get(f"/v1/runs?since=0001-01-01T00:00:00Z&until={end}").status_code == 200
    # The furthest a cursor may point (year 9892).
    far = encode_search_cursor(parse_rfc3339("9892-01-01T00:00:00Z"), next(iter(history["runs"])))
    resp = client.get(f"/v1/runs?cursor={far}")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert {i["id"] for i in resp.get_json()["items"]} <= everything
    assert client.get(f"/v1/stats/runs?until={end}").status_code == 200
    job_id = history["jobs"]["digest"]["id"]
    assert client.get(f"/v1/jobs/{job_id}/runs?until={end}").status_code == 200


def test_tokens_scope_runs_and_stats(client, store, history):
    billing, _ = store.tokens.create_token("billing", ["billing"])
    headers = {"Authorization": f"Bearer {billing}"}
    seen = pages(client, "/v1/runs", headers)
    assert seen and {i["namespace"] for i in seen} == {"billing"}
    error_of(client.get("/v1/runs?namespace=search", headers=headers), 403)
    error_of(client.get("/v1/stats/runs?namespace=search", headers=headers), 403)
    mine = client.get("/v1/stats/runs?since=-4h&step=3600", headers=headers).get_json()
    admin, _ = store.tokens.create_token("admin", None)
    every = client.get("/v1/stats/runs?since=-4h&step=3600",
                       headers={"Authorization": f"Bearer {admin}"}).get_json()
    assert sum(b["fires"] for b in mine["buckets"]) == sum(
        1 for n, *_ in history["runs"].values() if n != "index")
    assert sum(b["fires"] for b in every["buckets"]) == len(history["runs"])


def test_stats_buckets(client, history):
    body = client.get("/v1/stats/runs?since=-3h&step=600").get_json()
    assert body["step_seconds"] == 600
    since, until = parse_rfc3339(body["since"]), parse_rfc3339(body["until"])
    assert since.timestamp() % 600 == 0 and until.timestamp() % 600 == 0
    times = [parse_rfc3339(b["t"]) for b in body["buckets"]]
    assert times == [since + timedelta(seconds=600 * i) for i in range(len(times))]
    assert times[-1] + timedelta(seconds=600) == until
    runs = history["runs"].values()
    for bucket, start in zip(body["buckets"], times, strict=True):
        inside = [r for r in runs if start <= r[1] < start + timedelta(seconds=600)]
        assert bucket["fires"] == len(inside)
        assert bucket["failures"] == sum(1 for r in inside if r[2] in ("failed", "lost"))
        assert bucket["fires_per_s"] == round(len(inside) / 600, 3)
        late = sorted(r[3] for r in inside)
        assert bucket["lateness_p99_ms"] == (late[-1] if late else None)
    # Defaults: the last hour, about 120 steps; a step too small is widened.
    default = client.get("/v1/stats/runs").get_json()
    assert default["step_seconds"] == 30 and len(default["buckets"]) in (120, 121)
    wide = client.get("/v1/stats/runs?since=-7d&step=1").get_json()
    assert wide["step_seconds"] >= 420 and len(wide["buckets"]) <= 1442
    assert client.get("/v1/stats/runs?since=now&until=-1h").get_json()["buckets"] == []
    assert error_of(client.get("/v1/stats/runs?step=0"), 400)["field"] == "step"
    assert error_of(client.get("/v1/stats/runs?bucket=1"), 400)["field"] == "bucket"


def test_job_list_search_order_and_last_run(client, store, history):
    create(client, name="digest-eu", namespace="billing", labels={"team": "eu"})
    create(client, name="Digest-caps", namespace="billing")
    body = client.get("/v1/jobs?sort=name&name_prefix=digest").get_json()
    assert [j["name"] for j in body["items"]] == ["digest", "digest-eu"]
    assert all("last_run" not in j for j in body["items"])
    body = client.get("/v1/jobs?sort=name&with_last_run=true&limit=2").get_json()
    assert [(j["namespace"], j["name"]) for j in body["items"]] == [
        ("billing", "Digest-caps"), ("billing", "digest")]
    assert body["items"][0]["last_run"] is None
    newest = max((r for r in history["runs"].items() if r[1][0] == "digest"),
                 key=lambda r: r[1][1])
    assert body["items"][1]["last_run"]["id"] == newest[0]
    rest = client.get(f"/v1/jobs?sort=name&limit=10&cursor={body['next_cursor']}").get_json()
    assert [j["name"] for j in rest["items"]] == ["digest-eu", "invoice", "index"]
    by_label = client.get("/v1/jobs?sort=name&label=team:eu").get_json()["items"]
    assert [j["name"] for j in by_label] == ["digest-eu"]
    by_id = client.get("/v1/jobs?name_prefix=in").get_json()["items"]
    assert sorted(j["name"] for j in by_id) == ["index", "invoice"]
    assert error_of(client.get(f"/v1/jobs?cursor={body['next_cursor']}"), 400)["field"] == \
        "cursor"
    assert error_of(client.get("/v1/jobs?sort=age"), 400)["field"] == "sort"
    assert error_of(client.get("/v1/jobs?with_last_run=maybe"), 400)["field"] == "with_last_run"


def test_read_only_token_reads_but_never_writes(client, store, history):
    secret, record = store.tokens.create_token("viewer", ["billing"], read_only=True)
    assert record["read_only"] is True
    headers = {"Authorization": f"Bearer {secret}"}
    who = client.get("/v1/whoami", headers=headers).get_json()
    assert who == {"token": {"id": record["id"], "name": "viewer"}, "namespaces": ["billing"],
                   "admin": False, "read_only": True, "can_write": False}
    job = history["jobs"]["digest"]
    assert client.get(f"/v1/jobs/{job['id']}", headers=headers).status_code == 200
    assert client.get("/v1/runs?status=failed", headers=headers).status_code == 200
    run_id = next(iter(history["runs"]))
    for method, path, body in (
            ("post", "/v1/jobs", job_spec("x", namespace="billing")),
            ("post", f"/v1/jobs/{job['id']}/pause", None),
            ("post", f"/v1/jobs/{job['id']}/trigger", None),
            ("patch", f"/v1/jobs/{job['id']}", {"priority": 3}),
            ("delete", f"/v1/jobs/{job['id']}", None),
            ("post", f"/v1/runs/{run_id}/replay", None)):
        resp = getattr(client, method)(path, json=body, headers=headers)
        assert "read-only" in error_of(resp, 403)["message"], (method, path)
    assert client.get(f"/v1/jobs/{job['id']}", headers=headers).get_json()["paused"] is False
    writer, _ = store.tokens.create_token("writer", ["billing"])
    who = client.get("/v1/whoami", headers={"Authorization": f"Bearer {writer}"}).get_json()
    assert who["can_write"] is True and who["read_only"] is False


def test_whoami_while_open(client):
    assert client.get("/v1/whoami").get_json() == {
        "token": None, "namespaces": None, "admin": True, "read_only": False,
        "can_write": True}


def test_cli_creates_read_only_tokens(database_url, store):
    runner = CliRunner()
    out = runner.invoke(cli, ["tokens", "create", "--namespace", "ops", "--read-only", "--json",
                              "--database-url", database_url])
    assert out.exit_code == 0, out.output
    made = json.loads(out.output)
    assert made["read_only"] is True and made["namespaces"] == ["ops"]
    listed = runner.invoke(cli, ["tokens", "list", "--database-url", database_url])
    assert "read-only" in listed.output
    assert store.tokens.find_token(made["token"])["read_only"] is True


def test_cluster_events(client, coordinator, clock):
    coordinator.join(NodeInfo(id="n1", address="10.0.0.1:9100", started_at=utcnow()))
    clock[0] += 1
    coordinator.join(NodeInfo(id="n2", address="10.0.0.2:9100"))
    clock[0] += 1
    coordinator.leave("n2")
    body = client.get("/v1/cluster/events?since=-1h").get_json()
    assert [(e["node_id"], e["kind"]) for e in body["items"]] == [
        ("n2", "left"), ("n2", "joined"), ("n1", "joined")]
    assert body["items"][2]["address"] == "10.0.0.1:9100" and body["next_cursor"] is None
    newest = body["items"][0]["at"]
    assert [e["kind"] for e in client.get(f"/v1/cluster/events?since={newest}")
            .get_json()["items"]] == ["left"]
    assert error_of(client.get("/v1/cluster/events?since=x"), 400)["field"] == "since"
