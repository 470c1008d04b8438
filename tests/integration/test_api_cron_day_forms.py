"""The Quartz cron day forms over the API: ``GET /v1/jobs/{id}/next`` shows
their fire times, and bad forms are a 400 naming ``schedule.cron``."""

from __future__ import annotations

import calendar
import zlib

import pytest

from cronman.config import Settings
from cronman.processes.api import make_app
from cronman.schedules import load_zone
from cronman.timeutil import parse_rfc3339
from tests.support.api import job_spec


@pytest.fixture
def client(store, database_url):
    app = make_app(Settings(database_url=database_url), store=store)
    return app.test_client()


def next_local(client, cron: str, tz: str, count: int = 6):
    spec = job_spec(name=f"forms-{zlib.crc32(cron.encode())}",
                    schedule={"kind": "cron", "cron": cron, "timezone": tz})
    resp = client.post("/v1/jobs", json=spec)
    assert resp.status_code == 201, resp.get_json()
    job = resp.get_json()
    body = client.get(f"/v1/jobs/{job['id']}/next?count={count}").get_json()
    zone = load_zone(tz)
    times = [parse_rfc3339(t).astimezone(zone) for t in body["fire_times"]]
    assert len(times) == count and times == sorted(times)
    assert parse_rfc3339(job["next_fire_at"]).astimezone(zone) == times[0]
    return times


def test_next_shows_last_day_and_last_weekday(client):
    for t in next_local(client, "0 9 L * *", "Europe/Berlin"):
        assert t.day == calendar.monthrange(t.year, t.month)[1] and (t.hour, t.minute) == (9, 0)
    for t in next_local(client, "0 18 LW * *", "America/New_York"):
        assert t.weekday() < 5 and t.hour == 18
        last = calendar.monthrange(t.year, t.month)[1]
        assert all(calendar.weekday(t.year, t.month, d) >= 5 for d in range(t.day + 1, last + 1))


def test_next_shows_nth_and_last_weekday_and_nearest_weekday(client):
    for t in next_local(client, "30 7 * * fri#3", "Australia/Lord_Howe"):
        assert t.weekday() == 4 and 15 <= t.day <= 21
    for t in next_local(client, "0 12 * * 1L", "UTC"):
        assert t.weekday() == 0 and t.day + 7 > calendar.monthrange(t.year, t.month)[1]
    for t in next_local(client, "0 6 15W * *", "Asia/Tokyo"):
        assert t.weekday() < 5 and abs(t.day - 15) <= 2


@pytest.mark.parametrize("cron, words", [
    ("0 0 L * 5#3", "both restricted"), ("0 0 31W 2 *", "never"),
    ("0 0 L-31 * *", "offset 31"), ("0 0 * * 5#6", "1-5"), ("0 0 * * L", "bare 'L'"),
    ("0 0 ? * 6L", "Quartz"),
])
def test_bad_forms_are_a_400_naming_schedule_cron(client, cron, words):
    resp = client.post("/v1/jobs", json=job_spec(
        schedule={"kind": "cron", "cron": cron, "timezone": "UTC"}))
    assert resp.status_code == 400
    error = resp.get_json()["error"]
    assert error["field"] == "schedule.cron" and words in error["message"]
