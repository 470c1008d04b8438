"""``cronman agent``: a worker agent, and ``cronman agent images import``."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import click

from cronman.cli.group import RET_ERROR, RET_UNAVAILABLE, cli
from cronman.cli.scheduler import setup_logging
from cronman.config import Settings
from cronman.processes.agent import run_agent

log = logging.getLogger("cronman.agent")


def _settings(overrides: dict[str, Any]) -> Settings:
    try:
        return Settings.from_env(overrides)
    except ValueError as exc:
        click.echo(f"cronman agent: {exc}", err=True)
        sys.exit(RET_ERROR)


@cli.group("agent", invoke_without_command=True)
@click.option("--runtime", "runtime_kind", type=click.Choice(["containerd", "process"]),
              default="containerd", show_default=True, help="how containers are run")
@click.option("--agent-id", default=None, help="agent identity [env CRONMAN_AGENT_ID]")
@click.option("--redis-url", default=None, help="[env CRONMAN_REDIS_URL]")
@click.option("--labels", "agent_labels", default=None,
              help="k=v,k=v matched by a target's selector [env CRONMAN_AGENT_LABELS]")
@click.option("--cpu", "agent_cpu", type=float, default=None,
              help="cores offered [env CRONMAN_AGENT_CPU; the host's]")
@click.option("--memory-mb", "agent_memory_mb", type=int, default=None,
              help="MiB offered [env CRONMAN_AGENT_MEMORY_MB; the host's]")
@click.option("--slots", "agent_slots", type=int, default=None,
              help="containers at once [env CRONMAN_AGENT_SLOTS; 64]")
@click.option("--containerd-address", default=None,
              help="containerd's socket [env CRONMAN_CONTAINERD_ADDRESS]")
@click.option("--containerd-namespace", default=None,
              help="containerd namespace [env CRONMAN_CONTAINERD_NAMESPACE; cronman]")
@click.option("--host-policy", "agent_host_policy", default=None,
              help='the most a run may ask of this host, JSON: {"root": false, "networks": '
                   '["none"], "process": true} [env CRONMAN_AGENT_HOST_POLICY; non-root, '
                   'network none]')
@click.option("--log-level", default="info", show_default=True)
@click.pass_context
def agent(ctx: click.Context, /, runtime_kind: str, log_level: str, **flags: Any) -> None:
    """Run a worker agent until SIGTERM/SIGINT: it takes container runs from
    the scheduler nodes and runs them (needs CRONMAN_REDIS_URL)."""
    setup_logging(log_level)
    settings = _settings(flags)
    ctx.obj = settings
    if ctx.invoked_subcommand is not None:
        return
    if not settings.redis_url:
        click.echo("cronman agent: CRONMAN_REDIS_URL is not set: an agent meets the scheduler "
                   "nodes in Redis (cronman standalone runs a process agent of its own)",
                   err=True)
        sys.exit(RET_ERROR)
    try:
        asyncio.run(run_agent(settings, runtime_kind))
    except OSError as exc:
        click.echo(f"cronman agent: {exc}", err=True)
        sys.exit(RET_UNAVAILABLE)


@agent.group("images")
def images() -> None:
    """Images in the agent's containerd namespace."""


@images.command("import")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_obj
def images_import(settings: Settings, archive: Path) -> None:
    """Import an OCI image layout or docker save ARCHIVE (a .tar) into containerd."""
    from cronman.worker_agent.runtime import RuntimeError_
    from cronman.worker_agent.runtimes.containerd import ContainerdRuntime

    async def run() -> list[str]:
        runtime = ContainerdRuntime(settings.containerd_address, settings.containerd_namespace,
                                    state_dir=settings.agent_state_dir)
        try:
            return await runtime.import_image(archive)
        finally:
            await runtime.close()

    click.echo(f"importing {archive} into containerd namespace "
               f"{settings.containerd_namespace!r} ...", err=True)
    try:
        names = asyncio.run(run())
    except RuntimeError_ as exc:
        click.echo(f"cronman agent images import: {exc.message}", err=True)
        sys.exit(RET_UNAVAILABLE if exc.code == "runtime_unavailable" else RET_ERROR)
    for name in names:
        click.echo(name)
