"""/openapi.json: in sync with the Flask routes, a valid OpenAPI 3.1 document, and
the API fuzzed against it (schemathesis) on SQLite and PostgreSQL.

The fuzzing is one test per documented operation and database (each against a
fresh seeded store), not one test walking them all: pytest-xdist spreads them
over its workers, where the single test was the suite's longest (4.8 minutes
on PostgreSQL under load). Each database gets one phase: PostgreSQL, the
production store, the coverage phase (each field's boundary and wrong-type
values); SQLite the seeded random draws, which store what they make. On
PostgreSQL the same draws cost a fifth of the suite's time; what only
PostgreSQL refuses (NUL in text the validation let through would be a 500
there) is held by the NUL cases of test_api_jobs.py and test_api_work.py."""

from __future__ import annotations

import itertools
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, seed, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.config._auth import AuthConfig

from cronman.api.openapi.document import openapi_document
from cronman.config import Settings
from cronman.processes.api import make_app
from tests.support.api import job_spec

AUTOMATIC_METHODS = {"HEAD", "OPTIONS"}
HTTP_METHODS = ("get", "post", "put", "patch", "delete")
_toggle = itertools.count()


@pytest.fixture
def app(store, database_url):
    return make_app(Settings(database_url=database_url), store=store)


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
def fuzzed_app(store, database_url):
    """The API with auth on (CRONMAN_AUTH=required): the fuzzer sends a token,
    and its ignored_auth check tries calls without one. Claims never wait
    (CRONMAN_CLAIM_WAIT_MAX=0): a fuzzed claim answers at once."""
    return make_app(Settings(database_url=database_url, auth="required", claim_wait_max=0),
                    store=store)


@pytest.fixture
def seeded(fuzzed_app, store):
    """An admin token, and a job with a run (so item routes are not all 404s)."""
    secret, _ = store.tokens.create_token("fuzz", None)
    client = fuzzed_app.test_client()
    auth = {"Authorization": f"Bearer {secret}"}
    job = client.post("/v1/jobs", json=job_spec("seed"), headers=auth).get_json()
    run = client.post(f"/v1/jobs/{job['id']}/trigger", headers=auth).get_json()
    doc = fuzzed_app.test_client().get("/openapi.json").get_json()
    return {"token": secret, "job_id": job["id"], "run_id": run["id"],
            "rules": doc["x-semantic-rules"]}


OPERATIONS = [(method, path) for path, ops in openapi_document()["paths"].items()
              for method in ops if method in HTTP_METHODS]


@pytest.fixture(params=OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS])
def fuzzed_operation(request) -> tuple[str, str]:
    """One documented operation (method, path): the fuzzing test runs once per operation."""
    return request.param


# The operation the running test fuzzes, set by its api_schema fixture: the
# lazy schema's filter below keeps that one (schemathesis clones the fixture's
# schema with the lazy schema's filter, so a filter set in the fixture is lost;
# the document stays whole, so every other method of a path is still known).
_fuzzing: dict[str, tuple[str, str]] = {}


def _is_fuzzed(ctx) -> bool:
    return (ctx.operation.method.lower(), ctx.operation.path) == _fuzzing.get("operation")


@pytest.fixture
def api_schema(fuzzed_app, seeded, fuzzed_operation, database_url):
    _fuzzing["operation"] = fuzzed_operation
    schema = schemathesis.openapi.from_wsgi("/openapi.json", fuzzed_app)
    schema.config.auth = AuthConfig(openapi={"bearer": {"bearer": seeded["token"]}})
    if database_url.startswith("sqlite"):
        schema.config.phases.coverage.enabled = False
    else:
        schema.config.phases.fuzzing.enabled = False
    return schema


schema = schemathesis.pytest.from_fixture("api_schema").include(_is_fuzzed)

FUZZ_SEED = 20261124


def semantic_rule(rules: list[dict[str, str]], error: dict) -> dict[str, str] | None:
    """The documented rule a 400 answer names, if any (field suffix and message)."""
    field = error.get("field") or ""
    for rule in rules:
        if (field == rule["field"] or field.endswith("." + rule["field"])
                or rule["field"] == "") and rule["message"] in error.get("message", ""):
            return rule
    return None


@pytest.mark.slow
@schema.parametrize()
@seed(FUZZ_SEED)
@settings(max_examples=10, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case, seeded):
    """No 5xx; documented status codes, content types and bodies; schema-invalid
    input refused; schema-valid input accepted unless it broke one of the
    rules the document lists as x-semantic-rules (JSON Schema cannot state them)."""
    op_id = case.operation.definition.raw.get("operationId")
    positive = case.meta is None or case.meta.generation.mode.is_positive
    # Every other positive case about one job or run is pointed at the seeded one.
    if positive and case.path_parameters and op_id != "deleteJob" and next(_toggle) % 2:
        for name in ("job_id", "run_id"):
            if name in case.path_parameters:
                case.path_parameters[name] = seeded[name]
    response = case.call()
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
    if positive and response.status_code == 400:
        error = response.json()["error"]
        assert semantic_rule(seeded["rules"], error), (
            f"{case.method} {case.formatted_path}: schema-valid input refused: {error}\n"
            f"{case.as_curl_command()}")


def test_semantic_rules_are_narrow(seeded):
    """The exceptions name a field and, where a field has other rules, the message."""
    rules = seeded["rules"]
    assert semantic_rule(rules, {"field": "jobs[3].end_at",
                                 "message": "must be later than start_at"})
    assert not semantic_rule(rules, {"field": "end_at", "message": "must be a string"})
    assert not semantic_rule(rules, {"field": "cursor", "message": "invalid cursor"})
    assert not semantic_rule(rules, {"field": "schedule.at",
                                     "message": "is not a valid RFC 3339 timestamp"})
