"""/openapi.json: in sync with the Flask routes, a valid OpenAPI 3.1 document, and
the API fuzzed against it (schemathesis) on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.config._auth import AuthConfig

from cronman.api.app import create_app
from cronman.config import Settings
from tests.support.api import job_spec

AUTOMATIC_METHODS = {"HEAD", "OPTIONS"}
_toggle = itertools.count()


@pytest.fixture
def app(store, database_url):
    return create_app(Settings(database_url=database_url), store=store)


def flask_routes(app) -> dict[str, set[str]]:
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        routes.setdefault(path, set()).update(
            m.lower() for m in (rule.methods or ()) if m not in AUTOMATIC_METHODS)
    return routes


def test_every_route_is_documented_and_every_documented_path_exists(app):
    doc = app.test_client().get("/openapi.json").get_json()
    documented = {path: {m for m in ops if m in ("get", "post", "put", "patch", "delete")}
                  for path, ops in doc["paths"].items()}
    assert flask_routes(app) == documented


def test_document_is_valid_openapi_31(app):
    from openapi_spec_validator import validate

    doc = app.test_client().get("/openapi.json").get_json()
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_every_path_parameter_is_declared(app):
    doc = app.test_client().get("/openapi.json").get_json()
    for path, ops in doc["paths"].items():
        names = set(re.findall(r"{([a-z_]+)}", path))
        for method, op in ops.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, (method, path)


def test_job_schema_refuses_unknown_keys(app):
    schemas = app.test_client().get("/openapi.json").get_json()["components"]["schemas"]
    for name in ("JobCreate", "JobReplace", "JobPatch", "Retry", "Misfire", "BulkCreate",
                 "Backfill", "HttpTarget", "SqsTarget", "ContainerTarget", "CronSchedule"):
        assert schemas[name]["additionalProperties"] is False, name


@pytest.fixture
def seeded(app, store):
    """A job with a run (so item routes are not all 404s) and an admin token: with a
    token in the database the API demands one, and the fuzzer checks that too."""
    client = app.test_client()
    job = client.post("/v1/jobs", json=job_spec("seed")).get_json()
    run = client.post(f"/v1/jobs/{job['id']}/trigger").get_json()
    secret, _ = store.tokens.create_token("fuzz", None)
    return {"token": secret, "job_id": job["id"], "run_id": run["id"]}


@pytest.fixture
def api_schema(app, seeded):
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    schema.config.auth = AuthConfig(openapi={"bearer": {"bearer": seeded["token"]}})
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


# Bodies whose meaning the schema cannot capture (a cron expression that parses, an
# http(s) URL, since < until).
SEMANTIC_BODIES = {"createJob", "createJobs", "replaceJob", "updateJob", "backfillJob"}


@schema.parametrize()
@settings(max_examples=5, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case, seeded):
    """No 5xx, documented status codes and content types, answers matching their schemas."""
    op_id = case.operation.definition.raw.get("operationId")
    positive = case.meta is None or case.meta.generation.mode.is_positive
    # Every other positive case about one job or run is pointed at the seeded one.
    if positive and case.path_parameters and op_id != "deleteJob" and next(_toggle) % 2:
        for name in ("job_id", "run_id"):
            if name in case.path_parameters:
                case.path_parameters[name] = seeded[name]
    excluded = []
    if op_id in SEMANTIC_BODIES or (case.query or {}).get("cursor"):
        # Schema-valid yet refused is correct there: see SEMANTIC_BODIES, and an
        # opaque cursor we did not hand out.
        excluded.append(positive_data_acceptance)
    case.call_and_validate(excluded_checks=excluded)
