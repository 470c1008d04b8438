"""The WSGI entry point: ``gunicorn wsgi:app`` (settings from CRONMAN_* variables)."""

from __future__ import annotations

from cronman.api.app import create_app

app = create_app()
