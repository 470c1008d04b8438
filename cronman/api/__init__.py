"""The HTTP API (SPEC §5): app factory, blueprints, validation, auth, OpenAPI, dashboard."""

from __future__ import annotations
