"""gunicorn hooks used by ``cronman api`` (``-c python:cronman.api.gunicorn_conf``).

They keep prometheus_client's multiprocess directory right: emptied at start,
a dead worker's live gauges dropped, and a directory ``cronman api`` made for
this server removed at exit. Logging is cronman's (``logconfig_dict``: text
or CRONMAN_LOG_FORMAT=json, gunicorn's own boot lines held at WARNING), with
one line when the server is ready; access lines without secrets
(``AccessLogger``, see ``cronman.api.access_log``).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from gunicorn.glogging import Logger

from cronman.api.access_log import REDACTED, SECRET_HEADERS, redact_query, redact_target, redact_url
from cronman.observability import logs

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Set by ``cronman api`` when it created the directory itself (so it may delete it).
OWNED_METRICS_DIR_ENV = "CRONMAN_API_OWNED_METRICS_DIR"
# Set by ``cronman api --access-log``.
ACCESS_LOG_ENV = "CRONMAN_API_ACCESS_LOG"


logconfig_dict = logs.dict_config(access_log=os.environ.get(ACCESS_LOG_ENV) == "1")


class AccessLogger(Logger):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn's logger, its access atoms redacted (``logger_class``)."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any],
              request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        atoms["r"] = (f"{environ.get('REQUEST_METHOD')} "
                      f"{redact_target(str(environ.get('RAW_URI', '')))} "
                      f"{environ.get('SERVER_PROTOCOL')}")
        atoms["q"] = redact_query(str(environ.get("QUERY_STRING") or ""))
        referer = environ.get("HTTP_REFERER")
        atoms["f"] = redact_url(referer) if referer else "-"
        for name in SECRET_HEADERS:
            if f"{{{name}}}i" in atoms:
                atoms[f"{{{name}}}i"] = REDACTED
        return atoms


logger_class = AccessLogger


def when_ready(server: Any) -> None:
    cfg = server.cfg
    logging.getLogger("cronman.api").info(
        "cronman api listening on %s (%d workers x %d threads, pid %d)",
        ", ".join(str(b) for b in cfg.bind), cfg.workers, cfg.threads, os.getpid())


def on_starting(server: Any) -> None:
    path = os.environ.get(METRICS_DIR_ENV)
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)
        for stale in Path(path).glob("*.db"):
            stale.unlink(missing_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get(METRICS_DIR_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    path = os.environ.get(METRICS_DIR_ENV)
    if path and os.environ.get(OWNED_METRICS_DIR_ENV) == path:
        shutil.rmtree(path, ignore_errors=True)
