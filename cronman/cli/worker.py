"""``cronman worker --queue Q -- COMMAND ARGS…``: the shipped worker (a client command).

One process per claimed run (``cronman.client.command``), ``--concurrency``
at once, under the client's ``Worker`` (claims, heartbeats, reports). It
needs only the light install.
"""

from __future__ import annotations

import logging
import sys

import click

from cronman.cli.group import cli
from cronman.cli.options import api_options, fail
from cronman.client import ApiError, CronmanClient
from cronman.client.command import DEFAULT_KILL_AFTER, CommandHandler
from cronman.client.queues import CLAIM_WAIT_MAX
from cronman.client.worker import DEFAULT_GRACE, Worker

LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


@cli.command("worker", context_settings={"allow_interspersed_args": False})
@click.option("--queue", "-q", required=True, help="the work queue to take runs from")
@click.option("--namespace", "-n", default="default", show_default=True,
              help="the queue's namespace")
@click.option("--concurrency", "-c", type=click.IntRange(1, 1000), default=1,
              show_default=True, help="commands running at once")
@click.option("--worker-id", default=None, help="this worker's name [default: host-pid]")
@click.option("--kill-after", type=click.FloatRange(0), default=DEFAULT_KILL_AFTER,
              show_default=True, help="seconds from a cancel's SIGTERM to SIGKILL")
@click.option("--grace", type=click.FloatRange(0), default=DEFAULT_GRACE, show_default=True,
              help="seconds held runs may go on after SIGTERM/SIGINT")
@click.option("--wait", type=click.FloatRange(0, CLAIM_WAIT_MAX), default=20.0,
              show_default=True, help="seconds a claim waits for a run (long-poll)")
@click.option("--log-level", default="info", show_default=True)
@api_options
@click.argument("command", nargs=-1, required=True, metavar="-- COMMAND [ARG]...")
def worker(queue: str, namespace: str, concurrency: int, worker_id: str | None,
           kill_after: float, grace: float, wait: float, log_level: str, url: str,
           token: str | None, command: tuple[str, ...]) -> None:
    """Run COMMAND for each run of a work queue until SIGTERM/SIGINT.

    \b
    cronman worker --queue spark -n ml --concurrency 4 -- ./retrain.sh --full
    cronman worker -q etl -- sh -c 'jq .table; echo "CRONMAN_PROGRESS 50 half"; ...'

    \b
    Each command gets the run's payload (JSON) on stdin and in CRONMAN_PAYLOAD,
    and CRONMAN_RUN_ID, CRONMAN_JOB_ID, CRONMAN_ATTEMPT, CRONMAN_SCHEDULED_FOR,
    CRONMAN_QUEUE (and TRACEPARENT, TRACESTATE with tracing on). Exit 0: succeeded; else failed ("exit code N"). The result
    holds the exit code, this worker's id and the tail of stdout and stderr. A
    stdout line "CRONMAN_PROGRESS [PERCENT] [TEXT]" is sent as progress. A
    cancel sends SIGTERM to the command's process group, SIGKILL after
    --kill-after; if the worker dies, its commands' groups are stopped too.
    """
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT, stream=sys.stderr,
                        force=True)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    client = CronmanClient(url, token or None, pool_size=concurrency + 2)
    handler = CommandHandler(command, kill_after=kill_after)
    try:
        Worker(client, queue, handler, namespace=namespace, concurrency=concurrency,
               worker_id=worker_id, wait=wait, grace=grace).run()
    except ApiError as exc:
        fail(exc, "cronman worker", token_given=bool(token))
    finally:
        client.close()
