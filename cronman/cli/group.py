"""The root ``cronman`` click group; each command module attaches itself to it.

Client commands (``jobs``, ``runs``, ``cluster``, ``tokens``) are imported with the CLI:
they need only the light side of cronman. Server commands are imported when
they are called or listed, so the CLI starts without the server's
dependencies; without them, a server command says which extra to install.
The check asks for the distributions the ``server`` extra installs, read from
cronman's own package metadata (requirements-server.txt), not a list of its own.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from pathlib import Path
from typing import Any

import click

from cronman import __version__

# Exit codes of the cronman command.
RET_OK = 0
RET_ERROR = 1
RET_USAGE = 2
RET_UNAVAILABLE = 3

# Server command -> (the module that attaches it, a one-line description).
SERVER_COMMANDS: dict[str, tuple[str, str]] = {
    "api": ("cronman.cli.api_server", "Serve the HTTP API with gunicorn (wsgi:app)."),
    "scheduler": ("cronman.cli.scheduler", "Run one scheduler node until SIGTERM/SIGINT."),
    "standalone": ("cronman.cli.scheduler", "API + one scheduler node on SQLite, in one "
                                            "process, no Redis."),
    "migrate": ("cronman.cli.migrate", "Create or upgrade the database schema."),
    "bench": ("cronman_bench.cli", "The reproducible side-by-side benchmark."),
    "agent": ("cronman.cli.agent", "Run a worker agent (containers for container targets)."),
    "audit": ("cronman.cli.audit", "The audit trail: export the change stream, query it."),
}
SERVER_EXTRA = "server"
SERVER_EXTRA_HINT = "pip install 'cronman[server]'"
# What the server extra reads (pyproject.toml); used when cronman runs from a
# source tree that was never installed, so it has no package metadata.
SERVER_REQUIREMENTS_FILE = Path(__file__).resolve().parents[2] / "requirements-server.txt"


def server_requirements() -> list[str]:
    """The distributions the server extra installs, by name: from cronman's
    package metadata, else from the source tree's requirements-server.txt."""
    try:
        requires = importlib.metadata.requires("cronman")
    except importlib.metadata.PackageNotFoundError:
        requires = None
    if requires is not None:
        return [_requirement_name(r) for r in requires if _in_server_extra(r)]
    try:
        lines = SERVER_REQUIREMENTS_FILE.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    names = (_requirement_name(line.split("#", 1)[0]) for line in lines
             if not line.lstrip().startswith("-"))
    return [name for name in names if name]


def missing_server_packages() -> list[str]:
    """The server extra's distributions that are not installed here."""
    missing = []
    for name in server_requirements():
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def _requirement_name(requirement: str) -> str:
    match = _NAME.match(requirement)
    return match.group(0).strip() if match else ""


def _in_server_extra(requirement: str) -> bool:
    _, _, marker = requirement.partition(";")
    return _EXTRA.search(marker) is not None


_NAME = re.compile(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(rf"""\bextra\s*==\s*['"]{SERVER_EXTRA}['"]""")


class CronmanGroup(click.Group):
    """A group that imports server commands on demand (see the module docstring)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(self.commands)
        names.update(name for name, (module, _) in SERVER_COMMANDS.items() if _exists(module))
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in SERVER_COMMANDS:
            module, description = SERVER_COMMANDS[cmd_name]
            if not _exists(module):
                return None
            missing = missing_server_packages()
            if missing:
                return _needs_server(cmd_name, description, missing)
            importlib.import_module(module)
        return self.commands.get(cmd_name)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _needs_server(name: str, description: str, missing: list[str]) -> click.Command:
    def refuse(**_: Any) -> None:
        click.echo(f"error: `cronman {name}` is part of the cronman server, which is not "
                   f"installed here (missing: {', '.join(missing)}).\n"
                   f"Install it with: {SERVER_EXTRA_HINT}", err=True)
        raise SystemExit(RET_ERROR)

    return click.Command(
        name, callback=refuse, help=f"{description} [needs {SERVER_EXTRA_HINT}]",
        short_help=f"[server] {description}", add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


@click.group(cls=CronmanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cronman")
def cli() -> None:
    """cronman: a distributed cron and delayed-callback service."""
