"""The ``cronman`` command. Each module below attaches its commands to ``cli``."""

from __future__ import annotations

from cronman.cli import (  # noqa: F401  (imported for their commands)
    api_server,  # cronman api
    bench,  # cronman bench
    client,  # cronman jobs ..., cronman cluster
    migrate,  # cronman migrate
    scheduler,  # cronman scheduler, cronman standalone
    tokens,  # cronman tokens ...
)
from cronman.cli.group import cli


def main() -> None:
    cli()
