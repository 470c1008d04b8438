"""The API of notifications: a job's ``notify`` field (validated with dotted fields,
redacted, restored on PUT), namespace rules (CRUD, versions, token scopes) and
``/v1/notifications`` (filters, pages, one with its events); on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronman.config import Settings
from cronman.outbox.records import Event, PassResult, job_rules
from cronman.processes.api import make_app
from cronman.timeutil import utcnow
from tests.support.api import job_spec

HOOK = {"kind": "webhook", "url": "https://hooks.example.com/cronman",
        "headers": {"Authorization": "Bearer very-secret-token"}}
MAIL = {"kind": "email", "to": ["oncall@example.com"]}


@pytest.fixture
def client(store, database_url):
    return make_app(Settings(database_url=database_url), store=store).test_client()


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def error_of(resp, status):
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True))
    return resp.get_json()["error"]


@pytest.mark.parametrize(("notify", "field"), [
    ({"events": ["failed"]}, "notify"),
    ([{"events": ["failed"]}], "notify[0].channel"),
    ([{"events": [], "channel": MAIL}], "notify[0].events"),
    ([{"events": ["failed", "exploded"], "channel": MAIL}], "notify[0].events[1]"),
    ([{"events": ["failed", "failed"], "channel": MAIL}], "notify[0].events[1]"),
    ([{"events": ["late"], "channel": MAIL}], "notify[0].late_after"),
    ([{"events": ["failed"], "late_after": 60, "channel": MAIL}], "notify[0].late_after"),
    ([{"events": ["late"], "late_after": 0, "channel": MAIL}], "notify[0].late_after"),
    ([{"events": ["failed"], "channel": MAIL, "digest_interval": 0}], "notify[0].digest_interval"),
    ([{"events": ["failed"], "channel": MAIL, "cc": []}], "notify[0].cc"),
    ([MAIL and {"events": ["failed"], "channel": MAIL},
      {"events": ["lost"], "channel": {"kind": "email", "to": ["ok@example.com", "not an address"]}}],
     "notify[1].channel.to[1]"),
    ([{"events": ["failed"], "channel": {"kind": "email", "to": ["a@b.example\r\nBcc: x@y"]}}],
     "notify[0].channel.to[0]"),
    ([{"events": ["failed"], "channel": {"kind": "sms", "to": "+1"}}], "notify[0].channel.kind"),
    ([{"events": ["failed"], "channel": {"kind": "webhook", "url": "ftp://x.example/"}}],
     "notify[0].channel.url"),
    ([{"events": ["failed"], "channel": {"kind": "webhook", "url": "https://x.example/",
                                     "headers": {"Cronman-Signature": "forged"}}}],
     "notify[0].channel.headers.Cronman-Signature"),
    ([{"events": ["failed"], "channel": {"kind": "webhook", "url": "https://x.example/",
                                     "method": "GET"}}], "notify[0].channel.method"),
])
def test_bad_rules_are_400_naming_the_field(client, notify, field):
    assert error_of(client.post("/v1/jobs", json=job_spec(notify=notify)), 400)["field"] == field
    bulk = {"jobs": [job_spec("ok"), job_spec("bad", notify=notify)]}
    assert error_of(client.post("/v1/jobs/bulk", json=bulk), 400)["field"] == f"jobs[1].{field}"


def test_rules_are_normalised_shown_redacted_and_kept_through_a_put(client, store):
    notify = [{"events": ["failed", "late"], "late_after": 300, "channel": HOOK},
              {"events": ["recovered"], "channel": MAIL, "digest_interval": 60}]
    job = client.post("/v1/jobs", json=job_spec(notify=notify)).get_json()
    assert job["notify"][0]["channel"]["headers"] == {"Authorization": "Bear…"}
    assert job["notify"][0]["digest_interval"] == 900  # the default
    assert job["notify"][0]["channel"]["timeout"] == 10
    assert job["notify"][1] == {"events": ["recovered"], "late_after": None, "channel": MAIL,
                                "digest_interval": 60}
    # What was read goes back as it is: the secret stays.
    resp = client.put(f"/v1/jobs/{job['id']}", json={**job, "priority": 3})
    assert resp.status_code == 200, resp.get_json()
    stored = store.jobs.get_job(job["id"])
    assert stored.notify[0]["channel"]["headers"] == HOOK["headers"]
    assert stored.priority == 3
    # null removes the rules; history keeps them redacted.
    cleared = client.patch(f"/v1/jobs/{job['id']}", json={"notify": None}).get_json()
    assert cleared["notify"] is None and store.jobs.get_job(job["id"]).notify is None
    history = client.get(f"/v1/jobs/{job['id']}/history").get_json()["items"]
    assert "very-secret" not in str(history)


def test_namespace_rules_crud(client):
    body = {"namespace": "billing", "name": "oncall", "events": ["failed", "lost"], "channel": HOOK}
    created = client.post("/v1/notification-rules", json=body)
    assert created.status_code == 201
    rule = created.get_json()
    assert created.headers["Location"] == f"/v1/notification-rules/{rule['id']}"
    assert rule["channel"]["headers"] == {"Authorization": "Bear…"} and rule["version"] == 1
    assert error_of(client.post("/v1/notification-rules", json=body), 409)["field"] == "name"
    assert error_of(client.post("/v1/notification-rules", json={**body, "id": "x"}),
                    400)["field"] == "id"
    assert error_of(client.post("/v1/notification-rules", json={**body, "events": ["late"]}),
                    400)["field"] == "late_after"
    client.post("/v1/notification-rules", json={**body, "namespace": "search"})
    listed = client.get("/v1/notification-rules?namespace=billing").get_json()["items"]
    assert [r["id"] for r in listed] == [rule["id"]]
    page = client.get("/v1/notification-rules?limit=1").get_json()
    assert len(page["items"]) == 1 and page["next_cursor"]
    rest = client.get(f"/v1/notification-rules?limit=1&cursor={page['next_cursor']}").get_json()
    assert rest["items"][0]["id"] != page["items"][0]["id"] and rest["next_cursor"] is None
    # PUT what was read (redacted header included), with its version.
    changed = client.put(f"/v1/notification-rules/{rule['id']}",
                         json={**rule, "events": ["failed"]})
    assert changed.status_code == 200, changed.get_json()
    assert changed.get_json()["version"] == 2 and changed.get_json()["events"] == ["failed"]
    assert error_of(client.put(f"/v1/notification-rules/{rule['id']}", json=rule),
                    409)["field"] == "version"
    assert client.delete(f"/v1/notification-rules/{rule['id']}").status_code == 204
    error_of(client.get(f"/v1/notification-rules/{rule['id']}"), 404)
    error_of(client.delete(f"/v1/notification-rules/{rule['id']}"), 404)


def test_put_keeps_a_redacted_webhook_secret(client, store):
    body = {"namespace": "billing", "name": "hook", "events": ["failed"], "channel": HOOK}
    rule = client.post("/v1/notification-rules", json=body).get_json()
    client.put(f"/v1/notification-rules/{rule['id']}", json={**rule, "digest_interval": 60})
    [stored] = store.notification_rules.all_rules()["billing"]
    assert stored.channel["headers"] == HOOK["headers"] and stored.digest_interval == 60


@pytest.mark.parametrize("new_url", [
    "https://attacker.example.net/cronman",   # another host
    "http://hooks.example.com/cronman",       # another scheme
    "https://hooks.example.com:8443/cronman",  # another port
])
def test_a_webhook_secret_never_follows_a_changed_url(client, store, new_url):
    """Found by probing: a PATCH of a job's notify channel (or a PUT of a
    namespace rule) to a new URL kept the stored Authorization header, and
    the next failure delivered it to the new host."""
    notify = [{"events": ["failed"], "channel": MAIL},
              {"events": ["failed"], "channel": HOOK}]
    job = client.post("/v1/jobs", json=job_spec(notify=notify)).get_json()
    moved = [job["notify"][0], {**job["notify"][1], "channel": {
        **job["notify"][1]["channel"], "url": new_url}}]
    for method in (client.patch, client.put):
        body = {"notify": moved} if method == client.patch else {**job, "notify": moved}
        err = error_of(method(f"/v1/jobs/{job['id']}", json=body), 400)
        assert err["field"] == "notify[1].channel.headers.Authorization"
        assert "give the value again" in err["message"]
    assert store.jobs.get_job(job["id"]).notify[1]["channel"] == {**HOOK, "timeout": 10}
    # Given again, the new value goes with the new URL.
    moved[1]["channel"]["headers"] = {"Authorization": "Bearer for-the-new-host"}
    assert client.patch(f"/v1/jobs/{job['id']}", json={"notify": moved}).status_code == 200
    assert store.jobs.get_job(job["id"]).notify[1]["channel"]["headers"] == {
        "Authorization": "Bearer for-the-new-host"}

    rule = client.post("/v1/notification-rules", json={
        "namespace": "billing", "name": "hook", "events": ["failed"], "channel": HOOK}).get_json()
    err = error_of(client.put(f"/v1/notification-rules/{rule['id']}", json={
        **rule, "channel": {**rule["channel"], "url": new_url}}), 400)
    assert err["field"] == "channel.headers.Authorization"
    [stored] = store.notification_rules.all_rules()["billing"]
    assert stored.channel["url"] == HOOK["url"] and stored.channel["headers"] == HOOK["headers"]
    # The same host (another path) keeps the stored secret.
    same = client.put(f"/v1/notification-rules/{rule['id']}", json={
        **rule, "channel": {**rule["channel"], "url": "https://HOOKS.example.com/other"}})
    assert same.status_code == 200, same.get_json()
    [stored] = store.notification_rules.all_rules()["billing"]
    assert stored.channel["headers"] == HOOK["headers"]


def test_a_webhook_s_public_headers_are_shown_and_kept_as_they_are(client, store):
    """A channel's Content-Type was shown redacted ("appl…"), and a PUT of
    what was read stored the redacted text: channels follow the targets' rule."""
    hook = {**HOOK, "headers": {**HOOK["headers"], "Content-Type": "application/json"}}
    rule = client.post("/v1/notification-rules", json={
        "namespace": "billing", "name": "typed", "events": ["failed"], "channel": hook}
    ).get_json()
    assert rule["channel"]["headers"] == {"Authorization": "Bear…",
                                          "Content-Type": "application/json"}
    assert client.put(f"/v1/notification-rules/{rule['id']}", json=rule).status_code == 200
    [stored] = store.notification_rules.all_rules()["billing"]
    assert stored.channel["headers"] == hook["headers"]


def _outbox(store, job, *, kinds=("failed", "lost")):
    """Events of ``job`` put in the outbox as a notifier would."""
    [rule] = job_rules(job.id, job.notify)
    now = utcnow()
    events = [Event(rule=rule, kind=kind, event_key=f"{kind}:{i}", job_id=job.id,
                    namespace=job.namespace, job_name=job.name,
                    occurred_at=now - timedelta(seconds=10 - i), run_id=f"run-{i}",
                    scheduled_for=now, detail={"error": "boom"})
              for i, kind in enumerate(kinds)]
    store.notify_outbox.write_pass(PassResult(events=events), now=now, node_id="n1")


def test_notifications_list_filters_pages_and_one_with_events(client, store):
    billing = client.post("/v1/jobs", json=job_spec("a", namespace="billing", notify=[
        {"events": ["failed", "lost"], "channel": HOOK}])).get_json()
    search = client.post("/v1/jobs", json=job_spec("b", namespace="search", notify=[
        {"events": ["failed", "lost"], "channel": MAIL}])).get_json()
    _outbox(store, store.jobs.get_job(billing["id"]))  # an event, then a digest
    _outbox(store, store.jobs.get_job(search["id"]), kinds=("failed",))
    items = client.get("/v1/notifications").get_json()["items"]
    assert len(items) == 3
    digest = next(n for n in items if n["kind"] == "digest")
    assert digest["event"] is None and digest["event_count"] == 1
    assert digest["status"] == "pending" and digest["channel"]["headers"] == {
        "Authorization": "Bear…"}

    def ids(query):
        return [n["id"] for n in client.get(f"/v1/notifications?{query}").get_json()["items"]]

    assert ids("event=digest") == [digest["id"]]
    assert len(ids("event=failed")) == 2 and len(ids("status=pending,sent")) == 3
    assert ids("status=sent") == []
    assert len(ids(f"job_id={billing['id']}")) == 2 and len(ids("namespace=search")) == 1
    first = client.get("/v1/notifications?limit=2").get_json()
    more = client.get(f"/v1/notifications?limit=2&cursor={first['next_cursor']}").get_json()
    assert [n["id"] for n in first["items"] + more["items"]] == [n["id"] for n in items]
    one = client.get(f"/v1/notifications/{digest['id']}").get_json()
    assert [e["event"] for e in one["events"]] == ["lost"]
    assert one["events"][0]["detail"] == {"error": "boom"}
    error_of(client.get("/v1/notifications/0190aaaa-0000-7000-8000-000000000000"), 404)
    assert error_of(client.get("/v1/notifications?status=lost"), 400)["field"] == "status"
    assert error_of(client.get("/v1/notifications?job_id=x/y"), 400)["field"] == "job_id"
    assert error_of(client.get("/v1/notifications?color=red"), 400)["field"] == "color"


def test_token_scopes(client, store):
    job = client.post("/v1/jobs", json=job_spec("a", namespace="billing", notify=[
        {"events": ["failed", "lost"], "channel": MAIL}])).get_json()
    other = client.post("/v1/notification-rules", json={
        "namespace": "search", "name": "r", "events": ["failed"], "channel": MAIL}).get_json()
    _outbox(store, store.jobs.get_job(job["id"]))
    billing, _ = store.tokens.create_token("billing", ["billing"])
    h = auth(billing)
    error_of(client.get("/v1/notifications"), 401)
    assert len(client.get("/v1/notifications", headers=h).get_json()["items"]) == 2
    error_of(client.get("/v1/notifications?namespace=search", headers=h), 403)
    error_of(client.post("/v1/notification-rules", headers=h, json={
        "namespace": "search", "name": "x", "events": ["failed"], "channel": MAIL}), 403)
    error_of(client.get(f"/v1/notification-rules/{other['id']}", headers=h), 403)
    error_of(client.delete(f"/v1/notification-rules/{other['id']}", headers=h), 403)
    assert client.get("/v1/notification-rules", headers=h).get_json()["items"] == []
    mine = client.post("/v1/notification-rules", headers=h, json={
        "namespace": "billing", "name": "x", "events": ["failed"], "channel": MAIL})
    assert mine.status_code == 201
    moved = client.put(f"/v1/notification-rules/{mine.get_json()['id']}", headers=h,
                       json={"namespace": "search", "name": "x", "events": ["failed"],
                             "channel": MAIL})
    assert error_of(moved, 403)["field"] == "namespace"
