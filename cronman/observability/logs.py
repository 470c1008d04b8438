"""Logging set-up for every cronman process: text or JSON, with context.

``CRONMAN_LOG_FORMAT=json`` writes one JSON object per line: ``ts`` (RFC
3339, UTC), ``level``, ``logger``, ``message``, ``pid``, and ``node_id``,
``job_id``, ``run_id``, ``namespace`` where they apply, ``trace_id`` and
``span_id`` of the run's trace when tracing is on (observability.tracing),
``exc`` with a traceback. Those fields come from, in order: the record's own attributes
(``log.info(..., extra={"job_id": ...})``), the context bound for the code
running (``bind``: a scheduler binds each run's job, run and namespace in
the task that delivers it, the API binds the request's job or run), and the
process (``set_process_fields``: a scheduler's node id). The text format is
unchanged (``time LEVEL logger: message``).

Libraries that speak at INFO on every start (Alembic's plugin and context
lines, werkzeug's access lines, gunicorn's boot lines) are held at WARNING
unless the level asked for is DEBUG.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import traceback
from datetime import UTC, datetime
from typing import Any

FORMAT_ENV = "CRONMAN_LOG_FORMAT"
LEVEL_ENV = "CRONMAN_LOG_LEVEL"
TEXT, JSON = "text", "json"
FORMATS = (TEXT, JSON)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT_FIELDS = ("node_id", "namespace", "job_id", "run_id", "trace_id", "span_id")
QUIET_LOGGERS = ("alembic", "werkzeug", "gunicorn.error", "botocore", "boto3", "urllib3",
                 "aiohttp.access", "asyncio")

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "cronman_log_context", default=None)
_process_fields: dict[str, Any] = {}


def set_process_fields(**fields: Any) -> None:
    """Fields every record of this process carries (a scheduler's node_id)."""
    _process_fields.update({k: v for k, v in fields.items() if v is not None})


def bind(**fields: Any) -> None:
    """Fields for the records of the code running in this context (a thread's,
    or an asyncio task's, which starts with a copy of its creator's). Replaces
    what was bound before; no fields clears it."""
    _context.set({k: v for k, v in fields.items() if v is not None} or None)


def bind_run(node_id: str, job_id: str, run_id: str, namespace: str,
             trace_id: str | None = None, span_id: str | None = None) -> None:
    """``bind`` of a run's fields (the dispatcher's, once per attempt: no
    keyword dict to filter), with its trace's ids when tracing is on."""
    if trace_id is None:
        _context.set({"node_id": node_id, "job_id": job_id, "run_id": run_id,
                      "namespace": namespace})
    else:
        _context.set({"node_id": node_id, "job_id": job_id, "run_id": run_id,
                      "namespace": namespace, "trace_id": trace_id, "span_id": span_id})


class ContextFilter(logging.Filter):
    """Puts the bound and process fields on each record (its own ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _context.get()
        for source in (bound or {}, _process_fields):
            for key, value in source.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False)


def chosen_format(fmt: str | None = None) -> str:
    value = (fmt or os.environ.get(FORMAT_ENV) or TEXT).strip().lower()
    if value not in FORMATS:
        raise ValueError(f"{FORMAT_ENV} must be one of {', '.join(FORMATS)}, not {value!r}")
    return value


def level_number(level: str | None) -> int:
    name = (level or os.environ.get(LEVEL_ENV) or "info").strip().upper()
    number = logging.getLevelName(name)
    return number if isinstance(number, int) else logging.INFO


def make_formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == JSON else logging.Formatter(TEXT_FORMAT)


def configure(level: str | None = None, fmt: str | None = None) -> None:
    """Root logging to stderr in the chosen format, with context, libraries quiet."""
    number = level_number(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(chosen_format(fmt)))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    quiet(number)


def quiet(level: int) -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if level > logging.DEBUG else level)


def dict_config(level: str | None = None, fmt: str | None = None, *,
                access_log: bool = False) -> dict[str, Any]:
    """The same set-up as a ``logging.config.dictConfig`` dict (gunicorn's
    ``logconfig_dict``: its own loggers go through it too; its access lines
    only with ``access_log``)."""
    number = level_number(level)
    quiet_level = logging.getLevelName(logging.WARNING if number > logging.DEBUG else number)
    formatter: dict[str, Any] = ({"()": JsonFormatter} if chosen_format(fmt) == JSON
                                 else {"format": TEXT_FORMAT})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter}},
        "formatters": {"cronman": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                "formatter": "cronman", "filters": ["context"]}},
        "root": {"level": logging.getLevelName(number), "handlers": ["stderr"]},
        "loggers": {
            **{name: {"level": quiet_level, "handlers": [], "propagate": True}
               for name in QUIET_LOGGERS},
            "gunicorn.access": {"level": "INFO" if access_log else "WARNING", "handlers": [],
                                "propagate": True},
        },
    }
