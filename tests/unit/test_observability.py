"""Log records as JSON with their context, bounded namespace series, the
API's default worker count, the scheduler's health answers."""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import pytest
from prometheus_client import CollectorRegistry

from cronman.cli.api_server import default_workers, memory_limit_bytes
from cronman.observability import logs
from cronman.observability.namespace_series import OTHER, NamespaceSeries, limits_from_env
from cronman.observability.node_endpoints import health, readiness
from cronman.scheduler.runtime.lifecycle import Lifecycle


@pytest.fixture
def captured():
    """The root logger's records, formatted as JSON, with the context filter."""
    lines: list[str] = []

    class Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Sink()
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.ContextFilter())
    log = logging.getLogger("cronman.test.observability")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, lines
    log.removeHandler(handler)
    logs.bind()


def test_json_records_carry_their_context(captured):
    log, lines = captured
    logs.bind(job_id="j1", run_id="r1", namespace="billing")
    log.warning("run %s failed", "r1")
    log.info("own fields win", extra={"job_id": "j2"})
    logs.bind()
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("no context")
    first, second, third = (json.loads(line) for line in lines)
    assert first["message"] == "run r1 failed" and first["level"] == "warning"
    assert (first["job_id"], first["run_id"], first["namespace"]) == ("j1", "r1", "billing")
    assert first["logger"] == "cronman.test.observability" and first["ts"].endswith("Z")
    assert second["job_id"] == "j2" and second["run_id"] == "r1"
    assert "job_id" not in third and "ValueError: boom" in third["exc"]


def test_context_is_per_task(captured):
    log, lines = captured

    async def one(run_id: str) -> None:
        logs.bind(run_id=run_id)
        await asyncio.sleep(0)
        log.info("delivering")

    async def main() -> None:
        await asyncio.gather(one("a"), one("b"))

    asyncio.run(main())
    assert sorted(json.loads(line)["run_id"] for line in lines) == ["a", "b"]


def test_dict_config_quiets_libraries():
    cfg = logs.dict_config("info", "json")
    assert cfg["loggers"]["alembic"]["level"] == "WARNING"
    assert cfg["loggers"]["gunicorn.error"]["level"] == "WARNING"
    assert cfg["loggers"]["gunicorn.access"]["level"] == "WARNING"
    assert logs.dict_config("info", access_log=True)["loggers"]["gunicorn.access"]["level"] == \
        "INFO"
    assert logs.dict_config("debug")["loggers"]["alembic"]["level"] == "DEBUG"
    with pytest.raises(ValueError, match="CRONMAN_LOG_FORMAT"):
        logs.chosen_format("xml")


def test_namespace_series_are_bounded():
    registry = CollectorRegistry()
    series = NamespaceSeries(registry, limit=2)
    for ns in ("a", "b", "c", "d", "a"):
        series.fired(ns, 0.02)
    series.failed("c")
    series.failed("b")

    def value(name: str, ns: str) -> float | None:
        return registry.get_sample_value(name, {"namespace": ns})

    assert value("cronman_namespace_fires_total", "a") == 2
    assert value("cronman_namespace_fires_total", "b") == 1
    assert value("cronman_namespace_fires_total", OTHER) == 2
    assert value("cronman_namespace_fires_total", "c") is None
    assert value("cronman_namespace_failures_total", OTHER) == 1
    assert value("cronman_namespace_fire_lateness_seconds_count", "a") == 2
    listed = NamespaceSeries(CollectorRegistry(), allowed=frozenset({"x"}))
    assert [listed.label(n) for n in ("x", "y")] == ["x", OTHER]


def test_namespace_limits_from_env(monkeypatch):
    monkeypatch.setenv("CRONMAN_METRICS_NAMESPACES", "a, b,")
    monkeypatch.setenv("CRONMAN_METRICS_MAX_NAMESPACES", "7")
    assert limits_from_env() == (frozenset({"a", "b"}), 7)
    monkeypatch.setenv("CRONMAN_METRICS_MAX_NAMESPACES", "many")
    with pytest.raises(ValueError, match="CRONMAN_METRICS_MAX_NAMESPACES"):
        limits_from_env()


def test_default_workers_fit_the_memory_limit(tmp_path):
    mib = 1024 * 1024
    assert default_workers(cpus=16, limit_bytes=512 * mib) == 4  # ops/kubernetes/api.yaml
    assert default_workers(cpus=1, limit_bytes=512 * mib) == 2
    assert default_workers(cpus=16, limit_bytes=100 * mib) == 1
    v2 = tmp_path / "memory.max"
    v2.write_text("max\n")
    assert memory_limit_bytes((str(v2),)) is None
    v2.write_text(f"{512 * mib}\n")
    assert memory_limit_bytes((str(tmp_path / "missing"), str(v2))) == 512 * mib
    v2.write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert memory_limit_bytes((str(v2),)) is None


class FakeNode:
    node_id = "n1"
    members = ["n1", "n2"]

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.lifecycle = Lifecycle()
        self.writes = "ok"

    def readiness(self) -> tuple[bool, dict[str, str]]:
        checks = {"loaded": "ok" if self.ready.is_set() else "loading jobs", "clock": "ok",
                  "run_writes": self.writes}
        return all(v == "ok" for v in checks.values()), checks

    def load(self) -> dict[str, object]:
        return {"state": "overloaded", "backlog": 40, "behind_s": 2.5, "saturation": 1.0}


def test_health_and_readiness_answers():
    assert health(None)[0] == 200 and readiness(None)[0] == 503
    node = FakeNode()
    assert health(node) == (200, {"status": "ok", "node_id": "n1"})
    status, body = readiness(node)
    assert status == 503 and body["checks"]["loaded"] == "loading jobs"
    node.ready.set()
    # Overloaded is still ready (alive and working, behind), and says so.
    assert readiness(node) == (200, {"status": "ready", "node_id": "n1", "members": 2,
                                     "checks": {"loaded": "ok", "clock": "ok",
                                                "run_writes": "ok"},
                                     "database_member": None,
                                     "load": {"state": "overloaded", "backlog": 40,
                                              "behind_s": 2.5, "saturation": 1.0}})
    node.writes = "run writes failing for 12 s"
    assert readiness(node)[0] == 503
    node.writes = "ok"
    node.stopped.set()
    assert health(node)[0] == 503 and readiness(node)[0] == 503


def test_a_stuck_event_loop_fails_liveness():
    from cronman.observability.node_endpoints import loop_turns

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        assert loop_turns(loop, deadline=2.0)
        release = threading.Event()
        loop.call_soon_threadsafe(release.wait, 5.0)  # blocks the loop
        assert not loop_turns(loop, deadline=0.2)
        release.set()
        assert loop_turns(loop, deadline=2.0)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert not loop_turns(loop, deadline=0.1)  # closed


def test_access_lines_redact_sensitive_query_values():
    from cronman.api.access_log import redact_query, redact_target, redact_url

    assert redact_query("limit=5&token=abc&API_KEY=x&sig=1&status=failed&flag") == \
        "limit=5&token=***&API_KEY=***&sig=***&status=failed&flag"
    assert redact_target("/v1/runs?since=-1h&access_token=t#frag") == \
        "/v1/runs?since=-1h&access_token=***#frag"
    assert redact_target("/v1/jobs") == "/v1/jobs"
    assert redact_url("https://u:pw@console.example/?password=p&view=1") == \
        "https://console.example/?password=***&view=1"


def test_standalone_request_lines_are_redacted(caplog):
    """werkzeug's request lines (cronman standalone, shown at debug level)."""
    import urllib.request

    from werkzeug.serving import make_server

    from cronman.api.access_log import RequestHandler

    def app(environ, start_response):
        start_response("204 No Content", [])
        return [b""]

    server = make_server("127.0.0.1", 0, app, request_handler=RequestHandler)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/v1/jobs?token=SECRET&x=1",
                               timeout=10).close()
        thread.join(10)
    server.server_close()
    lines = [r.getMessage() for r in caplog.records if r.name == "werkzeug"]
    assert any("/v1/jobs?token=***&x=1" in line for line in lines), lines
    assert "SECRET" not in " ".join(lines)
