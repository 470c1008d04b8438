"""``GET /v1/forecast?from=&to=&namespace=&top=``: the herd forecast
(``herd``): fires per second ahead, per namespace and per destination, and
the seconds where a limit would hold fires back.

``from`` defaults to now, ``to`` to an hour after ``from``; each is RFC 3339,
``now``, or relative (``+1h``, ``-10m``). Bounded: at most ``MAX_RANGE``,
``MAX_JOBS`` jobs scanned (``jobs_truncated`` says when there were more) and
``MAX_FIRES`` fire times (a 400 naming ``to`` past it). A namespace token
sees its namespaces only.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from flask import Blueprint, Response, request

from cronman.api import validation as v
from cronman.api.common import ApiView, json_response, principal
from cronman.api.context import api_context
from cronman.api.herd import TooManyFires, count_fires, forecast_json
from cronman.errors import ValidationError
from cronman.limits import LimitIndex
from cronman.models import JobRow
from cronman.timeutil import TIME_HINT, parse_time_text, to_ms, utcnow

bp = Blueprint("forecast", __name__, url_prefix="/v1")

MAX_RANGE = timedelta(hours=24)
DEFAULT_RANGE = timedelta(hours=1)
MAX_JOBS = 100_000
MAX_FIRES = 1_000_000
TOP_DEFAULT = 20
TOP_MAX = 1000


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


class Forecast(ApiView):
    query_params = {"get": ("from", "to", "namespace", "top")}

    def get(self) -> Response:
        args = request.args
        now = utcnow()
        start = _time(args.get("from"), "from", now=now, default=now)
        try:
            end = _time(args.get("to"), "to", now=now, default=start + DEFAULT_RANGE)
        except OverflowError:
            raise ValidationError("the range must end before the year 10000", field="to") from None
        if end <= start:
            raise ValidationError("must be after 'from'", field="to")
        if end - start > MAX_RANGE:
            raise ValidationError(f"the range must be at most {MAX_RANGE.total_seconds() / 3600:g}"
                                  " h", field="to")
        top = v.parse_int_param(args.get("top"), "top", default=TOP_DEFAULT, lo=1, hi=TOP_MAX)
        namespace = args.get("namespace")
        who = principal()
        if namespace is not None:
            v.check_namespace(namespace)
            who.require(namespace, field="namespace")
        store = api_context().store
        all_limits = store.limits.all_limits()
        limits = LimitIndex(all_limits)
        labels = sorted({lim.value for lim in all_limits if lim.kind == "label"})
        labelled = store.limits.labelled_jobs(labels) if labels else {}
        scanned = 0
        truncated = False

        def rows() -> list[JobRow]:
            nonlocal scanned, truncated
            out: list[JobRow] = []
            for batch in store.jobs.iter_live_job_rows(batch_size=10_000):
                for row in batch:
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
            herd = count_fires(rows(), limits, to_ms(start), to_ms(end), max_fires=MAX_FIRES,
                               labelled=labelled)
        except TooManyFires:
            raise ValidationError(f"the range holds more than {MAX_FIRES} fires: narrow it "
                                  "(or give a namespace)", field="to") from None
        body = forecast_json(herd, limits, top=top)
        body["jobs_truncated"] = truncated
        if namespace is not None:
            body["namespace"] = namespace
        return json_response(body)


bp.add_url_rule("/forecast", view_func=Forecast.as_view("forecast"))
