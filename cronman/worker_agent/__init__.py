"""The worker agent (``cronman agent``): runs container targets on its host.

- :mod:`.agent`: the agent loop (membership, inbox, leases, reattach).
- :mod:`.runtime`: the ``ContainerRuntime`` contract and log tails.
- :mod:`.runtimes`: ``containerd`` (gRPC, generated stubs in
  ``runtimes/containerd_api``) and ``process`` (child processes).

The scheduler side of the hand-over is ``cronman.callbacks.container``; both
meet in an ``AgentDirectory`` (``cronman.coordination.agents``).
"""

from __future__ import annotations
