"""The ``cronman`` command. Each module below attaches its commands to ``cli``."""

from __future__ import annotations

import importlib

from cronman.cli.group import cli

_COMMAND_MODULES = (
    "migrate",      # cronman migrate
    "api_server",   # cronman api
    "client",       # cronman jobs ..., cronman cluster
    "tokens",       # cronman tokens ...
    "scheduler",    # cronman scheduler, cronman standalone
    "agent",        # cronman agent
    "bench",        # cronman bench
)

for _name in _COMMAND_MODULES:
    try:
        importlib.import_module(f"cronman.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command module not written yet
        if exc.name != f"cronman.cli.{_name}":
            raise


def main() -> None:
    cli()
