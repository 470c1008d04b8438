"""``GET /v1/forecast?from=&to=&namespace=&top=``: the herd forecast
(``herd``): fires per second ahead, per namespace and per destination, and
the seconds where a limit would hold fires back.

``from`` defaults to now, ``to`` to an hour after ``from``; each is RFC 3339,
``now``, or relative (``+1h``, ``-10m``). Bounded: at most ``MAX_RANGE``,
``MAX_JOBS`` jobs scanned (``jobs_truncated`` says when there were more) and
``MAX_FIRES`` fire times (a 400 naming ``to`` past it). A namespace token
sees its namespaces only.

``POST /v1/forecast`` takes the same keys in a JSON body, with a proposal
(``forecast_proposal``: jobs to make or replace, jobs left out, the limits
as they would be) counted in place of what is live; it changes nothing, so
a read-only token may make it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.common import (
    MAX_BULK_BODY_BYTES,
    ApiView,
    json_response,
    principal,
    read_json,
)
from cronman.api.context import api_context
from cronman.api.forecast_proposal import PROPOSAL_KEYS, Proposal, parse_proposal
from cronman.api.herd import HerdRow, TooManyFires, count_fires, forecast_json
from cronman.errors import ValidationError
from cronman.limits import QUOTA_PREFIX, LimitIndex
from cronman.timeutil import TIME_HINT, parse_time_text, to_ms, utcnow

bp = Blueprint("forecast", __name__, url_prefix="/v1")

MAX_RANGE = timedelta(hours=24)
DEFAULT_RANGE = timedelta(hours=1)
MAX_JOBS = 100_000
MAX_FIRES = 1_000_000
TOP_DEFAULT = 20
TOP_MAX = 1000
WINDOW_KEYS = ("from", "to", "namespace", "top")


def _time(raw: str | None, field: str, *, now: datetime, default: datetime) -> datetime:
    if raw is None:
        return default
    text = raw.strip()
    try:
        if text.startswith("+"):  # ahead of now: the relative form, mirrored
            return now + (now - parse_time_text("-" + text[1:], now=now))
        return parse_time_text(text, now=now)
    except (ValueError, OverflowError):
        raise ValidationError(f"must be {TIME_HINT} or +<n><unit> (ahead), not {raw!r}",
                              field=field) from None


@dataclass(frozen=True)
class Window:
    """What a forecast counts: the range, the seconds listed, the namespace."""

    start: datetime
    end: datetime
    top: int
    namespace: str | None


def _window(given: Mapping[str, Any], *, body: bool = False) -> Window:
    """The range of the query (a GET's parameters, a POST's body keys: there a
    key given is of its type, never null)."""
    now = utcnow()
    for key in ("from", "to", "namespace"):
        if (key in given if body else given.get(key) is not None) \
                and not isinstance(given[key], str):
            raise ValidationError("must be a string", field=key)
    start = _time(given.get("from"), "from", now=now, default=now)
    try:
        end = _time(given.get("to"), "to", now=now, default=start + DEFAULT_RANGE)
    except OverflowError:
        raise ValidationError("the range must end before the year 10000", field="to") from None
    if end <= start:
        raise ValidationError("must be after 'from'", field="to")
    if end - start > MAX_RANGE:
        raise ValidationError(f"the range must be at most {MAX_RANGE.total_seconds() / 3600:g}"
                              " h", field="to")
    raw_top = given.get("top")
    if body and "top" in given:  # JSON's integers: 3 and 3.0 alike
        if isinstance(raw_top, float) and raw_top.is_integer():
            raw_top = int(raw_top)
        if isinstance(raw_top, bool) or not isinstance(raw_top, int):
            raise ValidationError("must be an integer", field="top")
    top = v.parse_int_param(None if raw_top is None else str(raw_top), "top",
                            default=TOP_DEFAULT, lo=1, hi=TOP_MAX)
    namespace = given.get("namespace")
    if namespace is not None:
        v.check_namespace(namespace)
        principal().require(namespace, field="namespace")
    return Window(start, end, top, namespace)


def _forecast(window: Window, proposal: Proposal | None) -> Response:
    """The forecast of the live jobs, or of them as ``proposal`` would leave them."""
    namespace = window.namespace
    who = principal()
    store = api_context().store
    all_limits = store.limits.all_limits()
    if proposal is not None and proposal.limits is not None:
        all_limits = [*proposal.limits,
                      *(lim for lim in all_limits if lim.name.startswith(QUOTA_PREFIX))]
    limits = LimitIndex(all_limits)
    labels = sorted({lim.value for lim in all_limits if lim.kind == "label"})
    labelled = store.limits.labelled_jobs(labels) if labels else {}
    removed: frozenset[str] = frozenset()
    if proposal is not None:
        labelled = proposal.labelled(labelled)
        removed = proposal.removed
    scanned = 0
    truncated = False

    def rows() -> list[HerdRow]:
        nonlocal scanned, truncated
        out: list[HerdRow] = []
        live: Iterator[HerdRow] = (row for batch in store.jobs.iter_live_job_rows(batch_size=10_000)
                for row in batch if row.id not in removed)
        proposed: list[HerdRow] = list(proposal.jobs) if proposal is not None else []
        for row in itertools.chain(live, proposed):
            if namespace is not None and row.namespace != namespace:
                continue
            if not who.allows(row.namespace):
                continue
            if scanned >= MAX_JOBS:
                truncated = True
                return out
            scanned += 1
            out.append(row)
        return out

    try:
        herd = count_fires(rows(), limits, to_ms(window.start), to_ms(window.end),
                           max_fires=MAX_FIRES, labelled=labelled)
    except TooManyFires:
        raise ValidationError(f"the range holds more than {MAX_FIRES} fires: narrow it "
                              "(or give a namespace)", field="to") from None
    body = forecast_json(herd, limits, top=window.top)
    body["jobs_truncated"] = truncated
    if namespace is not None:
        body["namespace"] = namespace
    if proposal is not None:
        body["proposal"] = {"jobs": len(proposal.jobs), "removed": len(proposal.removed),
                            "limits": None if proposal.limits is None
                            else len(proposal.limits)}
    return json_response(body)


class Forecast(ApiView):
    query_params = {"get": WINDOW_KEYS}

    def get(self) -> Response:
        return _forecast(_window(request.args), None)

    def post(self) -> Response:
        """The forecast of a proposal (``forecast_proposal``); changes nothing."""
        body = v.require_object(read_json(max_bytes=MAX_BULK_BODY_BYTES), None)
        for key in body:
            if key not in (*WINDOW_KEYS, *PROPOSAL_KEYS):
                raise ValidationError(f"unknown field {key!r}", field=str(key))
        window = _window(body, body=True)
        proposal = parse_proposal(body, api_context().store, principal(), utcnow())
        return _forecast(window, proposal)


bp.add_url_rule("/forecast", view_func=Forecast.as_view("forecast"))
