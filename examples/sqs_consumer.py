"""An SQS consumer for cronman's ``sqs`` targets: checks the attributes, handles each run once.

    pip install cronman boto3
    QUEUE_URL=https://sqs.../my-queue python examples/sqs_consumer.py

Each message must carry cronman's ``cronman-job-id``, ``cronman-run-id`` and
``cronman-scheduled-for`` attributes (anything else is left on the queue for
its redrive policy: it is not ours to delete). A run already handled --
SQS delivers at least once, and cronman may send a run again -- is deleted
without being handled. A handler that fails leaves the message, which SQS
redelivers after its visibility timeout.

Settings (environment): QUEUE_URL (required), AWS_ENDPOINT_URL_SQS (an SQS
endpoint other than AWS's), REDIS_URL (shared deduplication; else in
memory), OUTPUT (JSON lines of handled runs), IDLE_EXIT (seconds without a
message after which to stop; default: run forever).
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from typing import Any

import boto3

from cronman.receiver import (
    Callback,
    Claim,
    InvalidCallback,
    MemoryDeduplicator,
    RedisDeduplicator,
    process_once,
    sqs_callback,
)


def handle(callback: Callback) -> None:
    line = json.dumps({"run_id": callback.run_id, "job_id": callback.job_id,
                       "scheduled_for": callback.scheduled_for,
                       "body": callback.body.decode("utf-8", "replace")})
    path = os.environ.get("OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    else:
        print(line, flush=True)


def main() -> None:
    queue_url = os.environ.get("QUEUE_URL") or sys.exit("set QUEUE_URL")
    sqs = boto3.client("sqs", endpoint_url=os.environ.get("AWS_ENDPOINT_URL_SQS") or None)
    dedup: Any
    if os.environ.get("REDIS_URL"):
        import redis

        dedup = RedisDeduplicator(redis.Redis.from_url(os.environ["REDIS_URL"]))
    else:
        dedup = MemoryDeduplicator()
    idle_exit = float(os.environ["IDLE_EXIT"]) if os.environ.get("IDLE_EXIT") else None
    last_message = time.monotonic()
    while idle_exit is None or time.monotonic() - last_message < idle_exit:
        answer = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                     WaitTimeSeconds=1, MessageAttributeNames=["All"])
        for message in answer.get("Messages", []):
            last_message = time.monotonic()
            try:
                callback = sqs_callback(message)
            except InvalidCallback as exc:
                print(f"not a cronman message ({exc.reason}): left on the queue",
                      file=sys.stderr, flush=True)
                continue
            try:
                claim, _ = process_once(dedup, callback.run_id, partial(handle, callback))
            except Exception as exc:  # leave it: SQS redelivers after the visibility timeout
                print(f"run {callback.run_id} failed: {exc}", file=sys.stderr, flush=True)
                continue
            if claim is Claim.IN_PROGRESS:
                continue  # another consumer holds it; SQS redelivers if that one fails
            if claim is Claim.DONE:
                print(f"duplicate of run {callback.run_id}: deleted", file=sys.stderr,
                      flush=True)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


if __name__ == "__main__":
    main()
