"""Workflows over the API on SQLite and PostgreSQL: dependencies and triggers
(references, cycles, deletes, token scopes), the runs a success triggers
(exactly once, all/any), exclusion calendars (CRUD, references, /next)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.models import RunFilter, RunUpdate
from cronman.processes.api import make_app
from cronman.timeutil import format_rfc3339, parse_rfc3339, utcnow
from tests.support.api import job_spec

EVERY_MINUTE = {"kind": "interval", "every": 60}


@pytest.fixture
def client(store, database_url):
    return make_app(Settings(database_url=database_url), store=store).test_client()


def create(client, name, namespace="default", headers=None, **spec):
    resp = client.post("/v1/jobs", json=job_spec(name, namespace=namespace, **spec),
                       headers=headers)
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()


def error(resp, status=400):
    assert resp.status_code == status, resp.get_json()
    return resp.get_json()["error"]


def after(*refs, mode=None):
    spec = {"kind": "after", "jobs": list(refs)}
    if mode:
        spec["mode"] = mode
    return spec


def succeed(store, job_id, node="n1", attempt=1):
    """A run of ``job_id`` taken by ``node`` and written succeeded (as a node does)."""
    job = store.jobs.get_job(job_id)
    run = store.runs.request_trigger(job, utcnow())
    store.runs.take_requested_runs(node, utcnow() + timedelta(seconds=30), 1000)
    update = RunUpdate(id=run.id, scheduled_for=run.scheduled_for, status="succeeded",
                       attempt=attempt, finished_at=utcnow())
    store.runs.write_run_updates([update], node)
    return run, update


def runs_of(store, job_id):
    return store.runs.list_runs(job_id, RunFilter(), 1000, None).items


# -- references and the graph -------------------------------------------------------------


def test_references_are_stored_as_ids_and_the_graph_is_shown(client):
    up = create(client, "features", schedule=EVERY_MINUTE)
    other = create(client, "export", namespace="ml", schedule=EVERY_MINUTE)
    down = create(client, "train", schedule=after("features", "ml/export", up["id"]),
                  depends_on=[{"job": "ml/export", "within": 3600}])
    assert down["schedule"] == {"kind": "after", "jobs": [up["id"], other["id"]],
                                "mode": "all"}
    assert down["depends_on"] == [{"job": other["id"], "within": 3600, "wait": 600}]
    assert down["next_fire_at"] is None
    nxt = client.get(f"/v1/jobs/{down['id']}/next").get_json()
    assert nxt == {"fire_times": [], "excluded": []}
    deps = client.get(f"/v1/jobs/{down['id']}/dependencies").get_json()
    assert sorted((e["kind"], e["name"]) for e in deps["upstream"]) == [
        ("after", "export"), ("after", "features"), ("depends_on", "export")]
    assert deps["downstream"] == []
    deps = client.get(f"/v1/jobs/{other['id']}/dependencies").get_json()
    assert {(e["kind"], e["namespace"], e["name"]) for e in deps["downstream"]} == {
        ("after", "default", "train"), ("depends_on", "default", "train")}
    # What was read can be sent back unchanged.
    got = client.get(f"/v1/jobs/{down['id']}").get_json()
    resp = client.put(f"/v1/jobs/{down['id']}", json=got)
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["schedule"] == down["schedule"]


def test_a_reference_to_no_job_is_a_400_naming_it(client):
    create(client, "a", schedule=EVERY_MINUTE)
    e = error(client.post("/v1/jobs", json=job_spec("b", schedule=after("a", "nope"))))
    assert e["field"] == "schedule.jobs[1]" and "names no job" in e["message"]
    e = error(client.post("/v1/jobs", json=job_spec(
        "b", depends_on=[{"job": "00000000-0000-7000-8000-000000000000", "within": 60}])))
    assert e["field"] == "depends_on[0].job" and "names no job" in e["message"]
    e = error(client.post("/v1/jobs", json=job_spec("b", depends_on=[{"job": "a"}])))
    assert e["field"] == "depends_on[0].within"
    e = error(client.post("/v1/jobs", json=job_spec("b", depends_on=[
        {"job": "a", "within": 60, "wait": -1}])))
    assert e["field"] == "depends_on[0].wait"
    e = error(client.post("/v1/jobs", json=job_spec("b", schedule={"kind": "after",
                                                                   "jobs": []})))
    assert e["field"] == "schedule.jobs"
    e = error(client.post("/v1/jobs", json=job_spec("b", schedule={
        "kind": "after", "jobs": ["a"], "mode": "some"})))
    assert e["field"] == "schedule.mode"


def test_cycles_are_refused_naming_them(client):
    a = create(client, "a", schedule=EVERY_MINUTE)
    b = create(client, "b", schedule=after("a"))
    c = create(client, "c", schedule=EVERY_MINUTE, depends_on=[{"job": "b", "within": 60}])
    e = error(client.patch(f"/v1/jobs/{a['id']}", json={
        "depends_on": [{"job": "c", "within": 60}]}))
    assert e["field"] == "depends_on[0].job"
    assert "cycle" in e["message"]
    assert "default/a → default/b → default/c → default/a" in e["message"]
    e = error(client.patch(f"/v1/jobs/{a['id']}", json={"schedule": after("b", "c")}))
    assert e["field"].startswith("schedule.jobs[") and "cycle" in e["message"]
    e = error(client.patch(f"/v1/jobs/{a['id']}", json={"schedule": after(a["id"])}))
    assert e["field"] == "schedule.jobs[0]" and "itself" in e["message"]
    # Nothing was written: a is as it was, and c still hangs off b.
    assert client.get(f"/v1/jobs/{a['id']}").get_json()["version"] == a["version"]
    # A bulk create naming jobs of the same request: fine as a chain, refused as a cycle.
    resp = client.post("/v1/jobs/bulk", json={"jobs": [
        job_spec("x", schedule=after("y")), job_spec("y", schedule=EVERY_MINUTE)]})
    assert resp.status_code == 201, resp.get_json()
    e = error(client.post("/v1/jobs/bulk", json={"jobs": [
        job_spec("p", schedule=after("q")), job_spec("q", schedule=after("p"))]}))
    assert e["field"].startswith("jobs[") and "cycle" in e["message"]
    assert client.get(f"/v1/jobs/{c['id']}/dependencies").get_json()["upstream"][0][
        "job_id"] == b["id"]


def test_a_job_others_depend_on_is_deleted_only_when_forced(client, store):
    up = create(client, "up", schedule=EVERY_MINUTE)
    down = create(client, "down", schedule=after("up"))
    e = error(client.delete(f"/v1/jobs/{up['id']}"), 409)
    assert "default/down (after)" in e["message"] and "force the delete" in e["message"]
    assert e["field"] == "force" and "force=true" not in e["message"]
    assert client.get(f"/v1/jobs/{up['id']}").status_code == 200
    assert error(client.delete(f"/v1/jobs/{up['id']}?force=maybe"))["field"] == "force"
    assert client.delete(f"/v1/jobs/{up['id']}?force=true").status_code == 204
    deps = client.get(f"/v1/jobs/{down['id']}/dependencies").get_json()
    assert deps["upstream"] == [{"job_id": up["id"], "kind": "after", "namespace": "default",
                                 "name": "up", "deleted": True}]
    # The downstream itself goes without force; an upstream of nothing too.
    assert client.delete(f"/v1/jobs/{down['id']}").status_code == 204


def test_dependencies_across_namespaces_follow_token_scopes(client, store):
    create(client, "export", namespace="billing", schedule=EVERY_MINUTE)
    secret, _ = store.tokens.create_token("ml-team", ["ml"])
    ml = {"Authorization": f"Bearer {secret}"}
    resp = client.post("/v1/jobs", headers=ml, json=job_spec(
        "train", namespace="ml", schedule=after("billing/export")))
    e = error(resp, 403)
    assert e["field"] == "schedule.jobs[0]"
    both, _ = store.tokens.create_token("both", ["ml", "billing"])
    down = create(client, "train", namespace="ml", schedule=after("billing/export"),
                  headers={"Authorization": f"Bearer {both}"})
    # The ml token sees its job's upstream, but not its name.
    deps = client.get(f"/v1/jobs/{down['id']}/dependencies", headers=ml).get_json()
    assert deps["upstream"][0]["name"] is None and deps["upstream"][0]["deleted"] is False
    # A billing token may not delete the upstream, and is not told the ml job's name.
    billing, _ = store.tokens.create_token("billing", ["billing"])
    up_id = down["schedule"]["jobs"][0]
    e = error(client.delete(f"/v1/jobs/{up_id}",
                            headers={"Authorization": f"Bearer {billing}"}), 409)
    assert "1 in other namespaces" in e["message"] and "train" not in e["message"]


def test_a_cycle_names_only_the_jobs_the_caller_may_see(client, store):
    """Found by probing: a cycle error named jobs of namespaces the caller's
    token cannot see."""
    both, _ = store.tokens.create_token("both", ["ml", "billing"])
    ml, _ = store.tokens.create_token("ml-team", ["ml"])
    h_both, h_ml = ({"Authorization": f"Bearer {t}"} for t in (both, ml))
    a = create(client, "a", namespace="ml", schedule=EVERY_MINUTE, headers=h_both)
    create(client, "secret-report", namespace="billing", schedule=after("ml/a"), headers=h_both)
    c = create(client, "c", namespace="ml", schedule=after("billing/secret-report"),
               headers=h_both)
    closing = {"depends_on": [{"job": c["id"], "within": 60}]}
    e = error(client.patch(f"/v1/jobs/{a['id']}", json=closing, headers=h_ml))
    assert e["field"] == "depends_on[0].job" and "cycle" in e["message"]
    assert "billing" not in e["message"] and "secret-report" not in e["message"]
    assert "ml/a → (a job of another namespace) → ml/c → ml/a" in e["message"]
    e = error(client.patch(f"/v1/jobs/{a['id']}", json=closing, headers=h_both))
    assert "ml/a → billing/secret-report → ml/c → ml/a" in e["message"]


def test_a_foreign_job_id_is_answered_as_an_unknown_one(client, store):
    """Found by probing: depends_on naming another namespace's job by id was
    a 403 naming that namespace, an unknown id a 400: an existence oracle."""
    foreign = create(client, "export", namespace="billing", schedule=EVERY_MINUTE)
    unknown = "01900000-0000-7000-8000-000000000000"
    ml, _ = store.tokens.create_token("ml-team", ["ml"])
    h_ml = {"Authorization": f"Bearer {ml}"}
    answers = []
    for ref in (foreign["id"], unknown):
        for spec in ({"depends_on": [{"job": ref, "within": 60}]}, {"schedule": after(ref)}):
            resp = client.post("/v1/jobs", headers=h_ml, json=job_spec(
                "train", namespace="ml", **{"schedule": EVERY_MINUTE, **spec}))
            e = error(resp, 400)
            answers.append((e["code"], e["field"], e["message"].replace(ref, "<id>")))
            assert "billing" not in e["message"]
    assert answers[:2] == answers[2:]


# -- triggers ------------------------------------------------------------------------------


def test_one_downstream_run_per_upstream_success_however_often_it_is_written(client, store):
    create(client, "up", schedule=EVERY_MINUTE)
    up = store.jobs.get_job(client.get("/v1/jobs").get_json()["items"][0]["id"])
    down = create(client, "down", schedule=after("up", mode="any"))
    run, update = succeed(store, up.id)
    store.runs.write_run_updates([update], "n1")  # a replayed write
    store.runs.write_run_updates([update])  # and one a sweeper makes
    [made] = runs_of(store, down["id"])
    assert made.origin == "upstream" and made.status == "claimed" and made.node_id is None
    assert made.gate["upstream"] == [{"job_id": up.id, "run_id": run.id, "attempt": 1,
                                      "scheduled_for": format_rfc3339(run.scheduled_for)}]
    # The downstream run is taken like a requested run.
    taken = store.runs.take_requested_runs("n2", utcnow() + timedelta(seconds=30), 10)
    assert [r.id for r in taken] == [made.id]
    # A replay of the upstream run is a new success: a new downstream run.
    store.runs.request_replay(run.id)
    store.runs.take_requested_runs("n1", utcnow() + timedelta(seconds=30), 10)
    store.runs.write_run_updates([RunUpdate(id=run.id, scheduled_for=run.scheduled_for,
                                            status="succeeded", attempt=2,
                                            finished_at=utcnow())], "n1")
    assert len(runs_of(store, down["id"])) == 2
    # A failure triggers nothing.
    failed, _ = succeed(store, up.id)
    store.runs.write_run_updates([RunUpdate(id=failed.id, scheduled_for=failed.scheduled_for,
                                            status="failed", attempt=2)], "n1")
    assert len(runs_of(store, down["id"])) == 3  # (succeed() made one more success)


def test_an_all_job_fires_once_every_upstream_succeeded(client, store):
    a = create(client, "a", schedule=EVERY_MINUTE)
    b = create(client, "b", schedule=EVERY_MINUTE)
    down = create(client, "both", schedule=after("a", "b"))
    first_a, _ = succeed(store, a["id"])
    second_a, _ = succeed(store, a["id"])
    assert runs_of(store, down["id"]) == []
    only_b, _ = succeed(store, b["id"])
    [made] = runs_of(store, down["id"])
    consumed = {u["run_id"] for u in made.gate["upstream"]}
    assert consumed == {first_a.id, second_a.id, only_b.id}
    succeed(store, b["id"])
    assert len(runs_of(store, down["id"])) == 1  # b again, a not yet
    succeed(store, a["id"])
    assert len(runs_of(store, down["id"])) == 2


def test_a_paused_or_deleted_downstream_hears_nothing(client, store):
    up = create(client, "up", schedule=EVERY_MINUTE)
    down = create(client, "down", schedule=after("up", mode="any"))
    client.post(f"/v1/jobs/{down['id']}/pause")
    succeed(store, up["id"])
    assert runs_of(store, down["id"]) == []
    client.post(f"/v1/jobs/{down['id']}/resume")
    succeed(store, up["id"])
    assert len(runs_of(store, down["id"])) == 1
    client.delete(f"/v1/jobs/{down['id']}")
    succeed(store, up["id"])
    assert len(runs_of(store, down["id"])) == 1


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_two_upstreams_succeeding_at_once_on_two_nodes_fire_an_all_job_once(client, store):
    """The downstream's row lock: neither write may see the other's half missing
    (and both see it complete) -- exactly one run per complete set."""
    ups = [create(client, f"u{i}", schedule=EVERY_MINUTE) for i in range(2)]
    down = create(client, "joined", schedule=after("u0", "u1"))
    for _ in range(8):
        pending = []
        for i, up in enumerate(ups):
            job = store.jobs.get_job(up["id"])
            run = store.runs.request_trigger(job, utcnow())
            store.runs.take_requested_runs(f"n{i}", utcnow() + timedelta(seconds=30), 10)
            pending.append((f"n{i}", RunUpdate(id=run.id, scheduled_for=run.scheduled_for,
                                               status="succeeded", attempt=1)))
        barrier = threading.Barrier(2)

        def write(node, update, barrier=barrier):
            barrier.wait()
            store.runs.write_run_updates([update], node)

        threads = [threading.Thread(target=write, args=p) for p in pending]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    made = runs_of(store, down["id"])
    assert len(made) == 8
    assert all(len(r.gate["upstream"]) == 2 for r in made)


# -- calendars ----------------------------------------------------------------------------


def test_calendars_crud_and_references(client, store):
    resp = client.post("/v1/calendars", json={"namespace": "billing", "name": "de-holidays",
                                              "timezone": "Europe/Berlin",
                                              "dates": ["2026-12-24", "--12-25", "--12-25"]})
    assert resp.status_code == 201, resp.get_json()
    cal = resp.get_json()
    assert cal["dates"] == ["--12-25", "2026-12-24"] and cal["version"] == 1
    e = error(client.post("/v1/calendars", json={"name": "x", "dates": ["2026-02-30"]}))
    assert e["field"] == "dates[0]" and "is not a calendar date" in e["message"]
    assert error(client.post("/v1/calendars", json={
        "namespace": "billing", "name": "de-holidays", "dates": []}), 409)["field"] == "name"
    listed = client.get("/v1/calendars?namespace=billing").get_json()["items"]
    assert [c["name"] for c in listed] == ["de-holidays"]
    # Jobs name it: in their namespace by name, from another as namespace/name.
    job = create(client, "report", namespace="billing", calendars=["de-holidays"])
    other = create(client, "mail", namespace="ops", calendars=["billing/de-holidays"])
    assert job["calendars"] == ["de-holidays"] and other["calendars"] == ["billing/de-holidays"]
    same = create(client, "report2", namespace="billing", calendars=["billing/de-holidays"])
    assert same["calendars"] == ["de-holidays"]
    e = error(client.post("/v1/jobs", json=job_spec("r3", namespace="billing",
                                                    calendars=["nope"])))
    assert e["field"] == "calendars[0]" and "names no calendar" in e["message"]
    # Replace (versioned), and a delete refused while jobs name it.
    resp = client.put(f"/v1/calendars/{cal['id']}", json={**cal, "dates": ["--01-01"]})
    assert resp.status_code == 200 and resp.get_json()["version"] == 2
    assert error(client.put(f"/v1/calendars/{cal['id']}", json={**cal, "dates": []}),
                 409)["field"] == "version"
    assert error(client.put(f"/v1/calendars/{cal['id']}", json={
        "namespace": "billing", "name": "renamed", "dates": []}), 409)["field"] == "name"
    e = error(client.delete(f"/v1/calendars/{cal['id']}"), 409)
    assert "billing/report" in e["message"] and "ops/mail" in e["message"]
    assert e["field"] == "force" and "force the delete" in e["message"]
    assert client.delete(f"/v1/calendars/{cal['id']}?force=true").status_code == 204
    assert client.get(f"/v1/calendars/{cal['id']}").status_code == 404


def test_calendars_follow_token_scopes(client, store):
    client.post("/v1/calendars", json={"namespace": "billing", "name": "c", "dates": []})
    secret, _ = store.tokens.create_token("ops", ["ops"])
    ops = {"Authorization": f"Bearer {secret}"}
    assert client.get("/v1/calendars", headers=ops).get_json()["items"] == []
    e = error(client.post("/v1/jobs", headers=ops, json=job_spec(
        "m", namespace="ops", calendars=["billing/c"])), 403)
    assert e["field"] == "calendars[0]"
    assert error(client.post("/v1/calendars", headers=ops, json={
        "namespace": "billing", "name": "d", "dates": []}), 403)["field"] == "namespace"


def test_next_says_which_fire_times_a_calendar_skips(client):
    today = utcnow().date()
    days = [today + timedelta(days=i) for i in range(1, 6)]
    client.post("/v1/calendars", json={"name": "off", "timezone": "UTC",
                                       "dates": [days[1].isoformat(), days[3].isoformat()]})
    job = create(client, "daily", schedule={"kind": "cron", "cron": "0 12 * * *"},
                 calendars=["off"])
    nxt = client.get(f"/v1/jobs/{job['id']}/next?count=6").get_json()
    excluded = {parse_rfc3339(e["fire_time"]).date(): e["calendar"] for e in nxt["excluded"]}
    assert excluded == {days[1]: "off", days[3]: "off"}
    assert len(nxt["fire_times"]) == 6
