"""The ``cronman`` command. Each module below attaches its commands to ``cli``.

Only the client commands are imported here; the server commands (api,
scheduler, standalone, migrate, bench, agent, audit) are imported by the
group when called (``SERVER_COMMANDS`` in :mod:`cronman.cli.group`), and so
are the database-side ``tokens`` subcommands (by their group).
"""

from __future__ import annotations

from cronman.cli import (  # noqa: F401  (imported for their commands)
    apply,  # cronman jobs apply
    jobs,  # cronman jobs ...
    limits,  # cronman limits ..., cronman quotas ..., cronman forecast
    notifications,  # cronman notifications ...
    queues,  # cronman queues, cronman runs cancel
    runs,  # cronman runs ..., cronman cluster
    signing,  # cronman signing-key show|rotate
    tokens_client,  # cronman tokens (api ... here; the database side on demand)
    worker,  # cronman worker -- COMMAND (the shipped worker)
    workflows,  # cronman jobs deps, cronman calendars ...
)
from cronman.cli.group import cli


def main() -> None:
    cli()
