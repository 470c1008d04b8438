"""The WSGI entry point: ``gunicorn wsgi:app`` (settings from CRONMAN_* variables)."""

from __future__ import annotations

from cronman.processes.api import make_app

app = make_app()
