"""cronman: a distributed cron and delayed-callback service."""

from __future__ import annotations

__version__ = "0.1.0"
