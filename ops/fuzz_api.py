#!/usr/bin/env python3
"""Fuzz the API against its own OpenAPI document with the schemathesis CLI.

A scratch PostgreSQL database is migrated, seeded with a job, a run and an
admin token, and `cronman api` (gunicorn) is started on a free loopback port
with ``CRONMAN_AUTH=required``; then ``st run`` drives every operation with a
fixed seed and every response check, and the counts are printed:

- cases: test cases sent;
- server errors: cases that failed ``not_a_server_error`` (a 5xx answer);
- mismatches: cases that failed any other check (a status code, content
  type, header or body the document does not describe, schema-valid input
  refused, schema-invalid input accepted, a call that ignored its auth) --
  except schema-valid input refused for breaking a rule the document lists
  in ``x-semantic-rules`` (what JSON Schema cannot state), which is counted
  apart as "semantic refusals";

and, per check, the failing cases by operation. ``--from-events FILE``
counts an event stream kept earlier (``--events``) instead of running,
with the rules of ``--rules-from`` (a document, default: the current one).

    .venv/bin/python ops/fuzz_api.py --seed 1 --max-examples 25

Not a test (``tests/integration/test_api_openapi.py`` runs schemathesis in
the suite); this is how the counts of a release are taken. The scratch
database is dropped at the end.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.api import http, job_spec, running_api  # noqa: E402
from tests.support.databases import temporary_pg_database  # noqa: E402


def seed(base: str, token: str) -> None:
    status, job, _ = http("POST", base + "/v1/jobs", job_spec("fuzz-seed"), token=token)
    assert status == 201, (status, job)
    status, run, _ = http("POST", f"{base}/v1/jobs/{job['id']}/trigger", {}, token=token)
    assert status == 202, (status, run)


def semantic_rule(rules: list[dict[str, str]], response: dict[str, Any]) -> bool:
    """Whether a recorded 400 answer names a documented semantic rule."""
    if response.get("status_code") != 400:
        return False
    try:
        error = json.loads(_text(response))["error"]
    except (TypeError, ValueError, KeyError):
        return False
    field = error.get("field") or ""
    return any((field == r["field"] or field.endswith("." + r["field"]) or not r["field"])
               and r["message"] in (error.get("message") or "") for r in rules)


def _text(response: dict[str, Any]) -> str:
    raw = response.get("content") or response.get("body")
    if isinstance(raw, dict) and "$base64" in raw:
        raw = base64.b64decode(raw["$base64"]).decode("utf-8", "replace")
    return str(raw)


def summarise(events: list[dict[str, Any]], rules: list[dict[str, str]]) -> dict[str, Any]:
    """Counts from the events of ``st run --report ndjson``: cases, and the
    cases that failed each check (with the operations they came from)."""
    semantic = 0
    cases = 0
    failed: dict[str, set[str]] = {}  # case id -> names of the checks it failed
    where: dict[str, Counter[str]] = {}
    answers: Counter[str] = Counter()
    for event in events:
        (kind, body), = event.items()
        recorder = body.get("recorder") if kind == "ScenarioFinished" else None
        if not recorder:
            continue
        cases += len(recorder.get("cases") or {})
        for case_id, checks in (recorder.get("checks") or {}).items():
            for check in checks:
                if check.get("status") == "success":
                    continue
                label = recorder.get("label") or "?"
                interaction = (recorder.get("interactions") or {}).get(case_id) or {}
                response = interaction.get("response") or {}
                if check["name"] == "positive_data_acceptance" and semantic_rule(rules,
                                                                                 response):
                    semantic += 1
                    continue
                failed.setdefault(case_id, set()).add(check["name"])
                where.setdefault(check["name"], Counter())[label] += 1
                answers[f"{check['name']}: {label} -> {describe(response)}"] += 1
    server_errors = sum(1 for names in failed.values() if "not_a_server_error" in names)
    mismatches = sum(1 for names in failed.values() if names - {"not_a_server_error"})
    return {"cases": cases, "server_errors": server_errors, "mismatches": mismatches,
            "semantic_refusals": semantic,
            "where": {name: dict(ops) for name, ops in where.items()},
            "answers": dict(answers)}


def describe(response: dict[str, Any]) -> str:
    """``400 schedule.at: is in the past`` for a recorded response."""
    raw = _text(response)
    try:
        error = json.loads(raw)["error"]
        text = f"{error.get('field')}: {error.get('message')}"
    except (TypeError, ValueError, KeyError):
        text = str(raw)[:80].replace("\n", " ")
    return f"{response.get('status_code')} {text}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-examples", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    ap.add_argument("--details", action="store_true",
                    help="list each distinct failing answer")
    ap.add_argument("--events", type=Path, default=None,
                    help="keep schemathesis' NDJSON event stream in this file")
    ap.add_argument("--from-events", type=Path, default=None,
                    help="count this kept event stream instead of running")
    ap.add_argument("--rules-from", type=Path, default=None,
                    help="an OpenAPI document whose x-semantic-rules to use")
    args = ap.parse_args()
    if args.rules_from is not None:
        rules = json.loads(args.rules_from.read_text())["x-semantic-rules"]
    else:
        from cronman.api.openapi.document import openapi_document

        rules = openapi_document()["x-semantic-rules"]
    if args.from_events is not None:
        lines = [json.loads(line) for line in args.from_events.read_text().splitlines() if line]
        report(args, summarise(lines, rules), None)
        return 0

    from cronman.store import open_store
    from cronman.store.migrate import upgrade

    with temporary_pg_database("cronman_fuzz") as url, tempfile.TemporaryDirectory() as tmp:
        upgrade(url)
        store = open_store(url)
        try:
            token, _ = store.tokens.create_token("fuzz", None)
        finally:
            store.close()
        env = {"CRONMAN_AUTH": "required"}
        with running_api(url, workers=args.workers, extra_env=env) as base:
            seed(base, token)
            events = (args.events or Path(tmp) / "events.ndjson").resolve()
            cmd = [str(Path(sys.executable).parent / "st"), "run", base + "/openapi.json",
                   "--header", f"Authorization: Bearer {token}",
                   "--seed", str(args.seed), "--max-examples", str(args.max_examples),
                   "--workers", "1", "--checks", "all",
                   "--phases", "examples,coverage,fuzzing", "--generation-database", "none",
                   "--continue-on-failure", "--no-color", "--output-truncate", "true",
                   "--report", "ndjson", "--report-ndjson-path", str(events)]
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            lines = [json.loads(line) for line in events.read_text().splitlines() if line]
        counts = summarise(lines, rules)
    report(args, counts, proc)
    return 0


def report(args: argparse.Namespace, counts: dict[str, Any],
           proc: subprocess.CompletedProcess[str] | None) -> None:
    if args.json:
        print(json.dumps(counts, indent=2, sort_keys=True))
    else:
        print(f"events of {args.from_events}" if args.from_events else
              f"seed {args.seed}, max examples {args.max_examples} per operation, auth on")
        print(f"cases {counts['cases']}, server errors {counts['server_errors']}, "
              f"mismatches {counts['mismatches']} (and {counts['semantic_refusals']} "
              "schema-valid cases refused for a documented semantic rule)")
        for name, ops in sorted(counts["where"].items()):
            print(f"  {name}: {sum(ops.values())} cases")
            for op, n in sorted(ops.items()):
                print(f"    {op}: {n}")
        if args.details:
            for answer, n in sorted(counts["answers"].items(), key=lambda kv: -kv[1]):
                print(f"{n:6d}  {answer}")
        if proc is not None and proc.returncode not in (0, 1):
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")


if __name__ == "__main__":
    sys.exit(main())
