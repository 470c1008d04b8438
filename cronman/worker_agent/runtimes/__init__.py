"""Container runtimes of the worker agent: ``containerd`` and ``process``."""

from __future__ import annotations
