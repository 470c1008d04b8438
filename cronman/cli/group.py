"""The root ``cronman`` click group; each command module attaches itself to it."""

from __future__ import annotations

import click

from cronman import __version__

# Exit codes of the cronman command.
RET_OK = 0
RET_ERROR = 1
RET_USAGE = 2
RET_UNAVAILABLE = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cronman")
def cli() -> None:
    """cronman: a distributed cron and delayed-callback service."""
