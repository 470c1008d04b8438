"""End to end on ``cronman standalone`` (SQLite, one process): a job whose
callback fails sends an email through a real SMTP server, its recovery too,
and ``cronman notifications`` shows what was sent; namespace rules through the
CLI."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cronman.cli import cli
from tests.support.api import http
from tests.support.processes import Processes
from tests.support.receiver import Receiver
from tests.support.smtp import SmtpServer
from tests.support.waiting import wait_for


def test_failure_and_recovery_by_email_and_the_cli(tmp_path):
    with SmtpServer() as mx, Receiver() as rx, Processes(tmp_path) as procs:
        rx.reply("/target", status=500)
        sa = procs.standalone(f"sqlite:///{tmp_path / 'cronman.db'}", env={
            "CRONMAN_SMTP_HOST": "127.0.0.1", "CRONMAN_SMTP_PORT": str(mx.port),
            "CRONMAN_SMTP_STARTTLS": "false", "CRONMAN_SMTP_FROM": "cronman@example.com",
            "CRONMAN_NOTIFY_POLL_INTERVAL": "0.3"})
        status, job, _ = http("POST", f"{sa.url}/v1/jobs", {
            "name": "export", "namespace": "billing",
            "schedule": {"kind": "interval", "every": 1},
            "target": {"kind": "http", "url": rx.url("/target")},
            "retry": {"max_attempts": 1},
            "notify": [{"events": ["failed", "recovered"], "digest_interval": 2,
                        "channel": {"kind": "email", "to": ["oncall@example.com"]}}]})
        assert status == 201, job
        [first] = mx.wait_for(1, timeout=15)
        assert first.subject.startswith("[cronman] billing/export: run failed")
        assert first.rcpt_tos == ["oncall@example.com"]
        rx.reply("/target", status=204)
        recovered = wait_for(lambda: [m for m in mx.mails if "recovered" in m.body], 15,
                             "a mail about the recovery")
        assert recovered

        runner = CliRunner()

        def cronman(*args):
            result = runner.invoke(cli, [*args, "--url", sa.url], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            return result.output

        listed = json.loads(cronman("notifications", "list", "--job", job["id"], "-o", "json"))
        assert listed["items"] and {n["job_id"] for n in listed["items"]} == {job["id"]}
        sent = json.loads(cronman("notifications", "list", "--status", "sent", "-o", "json"))
        assert len(sent["items"]) == len(mx.mails)
        table = cronman("notifications", "list", "--event", "failed")
        assert "billing/export" in table and "sent" in table
        one = cronman("notifications", "get", listed["items"][-1]["id"])
        assert "Events" in one and "failed" in one

        rule_file = tmp_path / "rule.yaml"
        rule_file.write_text("name: oncall\nevents: [lost]\n"
                             "channel: {kind: webhook, url: 'https://hooks.example.com/x',"
                             " headers: {Authorization: Bearer abcdefghijkl}}\n")
        created = json.loads(cronman("notifications", "rules", "create", "-f", str(rule_file),
                                     "-n", "billing", "-o", "json"))
        assert created["namespace"] == "billing" and created["events"] == ["lost"]
        assert created["channel"]["headers"] == {"Authorization": "Bear…"}
        assert "oncall" in cronman("notifications", "rules", "list", "-n", "billing")
        rule_file.write_text(json.dumps({**created, "events": ["lost", "failed"]}))
        updated = json.loads(cronman("notifications", "rules", "update", created["id"], "-f",
                                     str(rule_file), "-o", "json"))
        assert updated["version"] == 2 and updated["events"] == ["lost", "failed"]
        stale = runner.invoke(cli, ["notifications", "rules", "update", created["id"], "-f",
                                    str(rule_file), "--url", sa.url])
        assert stale.exit_code == 1 and "version" in stale.output
        assert "deleted" in cronman("notifications", "rules", "delete", created["id"])

        # Rules in YAML through `jobs apply`: a secret header does not make every
        # apply look like a change.
        (tmp_path / "jobs").mkdir()
        (tmp_path / "jobs" / "digest.yaml").write_text(
            "name: digest\nnamespace: billing\nschedule: {kind: cron, cron: '0 7 * * *'}\n"
            "target: {kind: http, url: 'https://billing.example.com/digest'}\n"
            "notify:\n  - events: [failed, late]\n    late_after: 600\n"
            "    channel: {kind: webhook, url: 'https://hooks.example.com/x',"
            " headers: {Authorization: Bearer abcdefghijkl}}\n")
        first_apply = cronman("jobs", "apply", "-f", str(tmp_path / "jobs"))
        assert "created" in first_apply
        assert "no changes" in cronman("jobs", "apply", "-f", str(tmp_path / "jobs"))
        sa.stop()
