"""The server commands' start (``cronman api``, ``cronman scheduler``,
``cronman audit export``): wait until the database answers with the current
schema. A missing or foreign schema exits at once; an unreachable database
(connection refused, a name not resolving, a server starting up, a Patroni
cluster promoting a replica: no member accepts writes for ~ttl seconds) is
waited for up to ``SCHEMA_WAIT_SECONDS``, so a process (re)started during a
failover comes up once the new primary answers instead of exiting."""

from __future__ import annotations

import logging
import sys
import time

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE

log = logging.getLogger("cronman.schema")

SCHEMA_WAIT_SECONDS = 60.0
RETRY_SECONDS = 2.0


def wait_for_schema(url: str, command: str,
                    timeout: float = SCHEMA_WAIT_SECONDS) -> None:
    """Return once the database answers with the current schema; else exit
    (``RET_ERROR``: the schema or the URL; ``RET_UNAVAILABLE``: still
    unreachable after ``timeout`` s). ``command`` prefixes the messages."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    from cronman.errors import StoreUnavailable
    from cronman.store.migrate import SchemaNotCurrent, check_schema_current

    deadline = time.monotonic() + timeout
    while True:
        try:
            check_schema_current(url)
            return
        except SchemaNotCurrent as exc:
            click.echo(f"{command}: {exc.message}", err=True)
            sys.exit(RET_ERROR)
        except (StoreUnavailable, OperationalError, InterfaceError, OSError) as exc:
            # Unreachable (connection refused, DNS, starting up): wait a while.
            if time.monotonic() >= deadline:
                click.echo(f"{command}: the database is unreachable: {exc}", err=True)
                sys.exit(RET_UNAVAILABLE)
            log.warning("database not reachable yet, retrying: %s", str(exc).splitlines()[0])
            time.sleep(RETRY_SECONDS)
        except Exception as exc:  # a URL that cannot work: unknown driver, bad syntax
            click.echo(f"{command}: cannot use the database URL: {exc}", err=True)
            sys.exit(RET_ERROR)
