"""``cronman worker -- COMMAND`` as a real process against a real HTTP server speaking the
worker calls' wire contract (tests/support/work_queue_server.py, loopback): what the
command gets, what is reported, progress lines, cancel (SIGTERM, then SIGKILL), the
worker's SIGKILL (no process of the run left) and SIGTERM (the grace)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from cronman.client.command import describe_exit, parse_progress
from cronman.logtail import LOG_TAIL_BYTES
from tests.support.processes import Processes
from tests.support.work_queue_server import work_queue_server


@pytest.fixture
def server():
    with work_queue_server(token="tok") as srv:
        yield srv


def start_worker(procs: Processes, server, *command: str, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):
    return procs.start("worker", ["worker", "--queue", "q", "--url", server.url, "--wait", "1",
                                  "--worker-id", "w1", *args, "--", *command],
                       {"CRONMAN_TOKEN": "tok", **(env or {})})


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_progress_lines_and_exit_codes_are_read():
    assert parse_progress("CRONMAN_PROGRESS 42 copied 4200 rows") == ("copied 4200 rows", 42.0)
    assert parse_progress("CRONMAN_PROGRESS 7.5") == (None, 7.5)
    assert parse_progress("CRONMAN_PROGRESS loading") == ("loading", None)
    assert parse_progress("CRONMAN_PROGRESS 420 items") == ("420 items", None)
    assert parse_progress("CRONMAN_PROGRESSING 1") is None
    assert parse_progress("progress 1") is None
    assert describe_exit(0) == (0, None)
    assert describe_exit(3) == (3, "exit code 3")
    assert describe_exit(-9) == (137, "killed by signal 9")


def test_a_command_gets_the_run_and_its_exit_and_output_are_reported(server, tmp_path):
    item = server.enqueue({"table": "users"}, heartbeat_timeout=1.0)
    script = ('read -r payload; echo "stdin=$payload"; echo "env=$CRONMAN_PAYLOAD"; '
              'echo "ids=$CRONMAN_RUN_ID $CRONMAN_JOB_ID $CRONMAN_ATTEMPT $CRONMAN_QUEUE"; '
              'echo "when=$CRONMAN_SCHEDULED_FOR token=${CRONMAN_TOKEN:-none}"; '
              'echo "CRONMAN_PROGRESS 40 halfway there"; sleep 0.8; '
              'head -c 10000 /dev/zero | tr "\\0" x >&2; echo " end" >&2; exit 4')
    with Processes(tmp_path) as procs:
        worker = start_worker(procs, server, "sh", "-c", script)
        server.wait_for(lambda: item.status == "failed", 15)
        assert worker.stop() == 0
    assert item.error == "exit code 4"
    result = item.result
    assert result["exit_code"] == 4 and result["worker_id"] == "w1"
    out = result["logs_tail"]["stdout"].splitlines()
    assert out[:4] == ['stdin={"table": "users"}', 'env={"table": "users"}',
                       f"ids={item.run_id} {item.job_id} 1 q",
                       f"when={item.scheduled_for} token=none"]
    err = result["logs_tail"]["stderr"]
    assert len(err.encode()) == LOG_TAIL_BYTES and err.endswith("x end\n")
    assert {"progress": "halfway there", "percent": 40.0}.items() <= item.heartbeats[0].items()
    # The heartbeats carry the output so far, each stream apart, only when it changed.
    outputs = [b["output"] for b in item.heartbeats if "output" in b]
    assert outputs and outputs[0]["stdout"].startswith('stdin={"table": "users"}'), outputs
    assert len(outputs) == len({(o["stdout"], o["stderr"]) for o in outputs})
    log = worker.log_text()
    assert f"run {item.run_id} started" in log and f"run {item.run_id} failed after" in log


def test_exit_zero_succeeds_and_runs_go_n_at_once(server, tmp_path):
    items = [server.enqueue({"n": n}, heartbeat_timeout=1.0) for n in range(2)]
    marks = tmp_path / "marks"
    with Processes(tmp_path) as procs:
        start_worker(procs, server, "sh", "-c", f"date +%s.%N >> {marks}; sleep 1",
                     args=("--concurrency", "2"))
        server.wait_for(lambda: all(i.status == "succeeded" for i in items), 15)
    starts = [float(x) for x in marks.read_text().split()]
    assert len(starts) == 2 and abs(starts[0] - starts[1]) < 0.8  # both ran at once
    assert all(i.result["exit_code"] == 0 and i.error is None for i in items)


def test_a_cancel_sends_sigterm_to_the_command(server, tmp_path):
    item = server.enqueue(heartbeat_timeout=1.0)
    got = tmp_path / "got"
    script = f"trap 'echo TERM > {got}; exit 143' TERM; echo started; while :; do sleep 0.1; done"
    with Processes(tmp_path) as procs:
        start_worker(procs, server, "sh", "-c", script)
        server.wait_for(lambda: item.status == "held" and item.heartbeats, 15)
        server.cancel(item.run_id)
        server.wait_for(lambda: item.status == "failed", 10)
    assert got.read_text() == "TERM\n"
    assert item.error == "cancel requested: exit code 143"


def test_a_command_that_ignores_sigterm_is_killed_after_kill_after(server, tmp_path):
    item = server.enqueue(heartbeat_timeout=1.0)
    with Processes(tmp_path) as procs:
        start_worker(procs, server, "sh", "-c", "trap '' TERM; sleep 30",
                     args=("--kill-after", "0.5"))
        server.wait_for(lambda: item.status == "held" and item.heartbeats, 15)
        server.cancel(item.run_id)
        cancelled = time.monotonic()
        server.wait_for(lambda: item.status == "failed", 10)
    assert time.monotonic() - cancelled < 3
    assert item.error == "cancel requested: killed by signal 9"
    assert item.result["exit_code"] == 137


def test_a_sigkilled_worker_leaves_no_process_of_its_run(server, tmp_path):
    item = server.enqueue(heartbeat_timeout=1.0)
    pids = tmp_path / "pids"
    script = f"sleep 60 & echo $$ $! > {pids}; wait"
    with Processes(tmp_path) as procs:
        worker = start_worker(procs, server, "sh", "-c", script, args=("--kill-after", "1"))
        server.wait_for(lambda: pids.exists() and pids.read_text().strip(), 15)
        shell, sleeper = (int(p) for p in pids.read_text().split())
        assert os.getpgid(sleeper) == os.getpgid(shell) != os.getpgid(worker.pid)
        worker.proc.send_signal(signal.SIGKILL)
        worker.wait(5)
        deadline = time.monotonic() + 5
        while (alive(shell) or alive(sleeper)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(shell) and not alive(sleeper)
    # Not reported: its lease runs out and the run is queued again.
    server.wait_for(lambda: item.status == "queued" and item.attempt == 2, 5)
    assert item.completions == []


@pytest.mark.parametrize("grace, status", [("5", "succeeded"), ("0.3", "failed")])
def test_sigterm_stops_claiming_and_gives_held_runs_the_grace(server, tmp_path, grace, status):
    item = server.enqueue(heartbeat_timeout=1.0)
    started = tmp_path / "started"
    with Processes(tmp_path) as procs:
        worker = start_worker(procs, server, "sh", "-c", f"touch {started}; sleep 1.5",
                              args=("--grace", grace, "--kill-after", "0.5"))
        server.wait_for(started.exists, 15)
        claims = len(server.claims)
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    assert item.status == status and len(server.claims) == claims
    if status == "failed":
        assert item.error == "worker stopped" and item.result["exit_code"] == 128 + 15


def test_nul_bytes_in_the_output_do_not_cost_the_report(server, tmp_path):
    item = server.enqueue(heartbeat_timeout=1.0)
    with Processes(tmp_path) as procs:
        start_worker(procs, server, "sh", "-c", r"printf 'a\0b\n'; printf 'c\0' >&2")
        server.wait_for(lambda: item.status == "succeeded", 15)
    assert item.result["logs_tail"] == {"stdout": "a\ufffdb\n", "stderr": "c\ufffd"}


def test_a_command_that_cannot_start_fails_its_run(server, tmp_path):
    item = server.enqueue(heartbeat_timeout=1.0)
    with Processes(tmp_path) as procs:
        start_worker(procs, server, str(Path(tmp_path) / "no-such-command"))
        server.wait_for(lambda: item.status == "failed", 15)
    assert item.error == "exit code 127"
    assert "cannot run" in item.result["logs_tail"]["stderr"]


def test_a_wrong_token_stops_the_worker_with_an_error(server, tmp_path):
    with Processes(tmp_path) as procs:
        worker = start_worker(procs, server, "true", env={"CRONMAN_TOKEN": "wrong"})
        assert worker.wait(15) == 1
    assert "HTTP 401" in worker.log_text() and json.dumps("x")
