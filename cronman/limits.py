"""Limits per destination and quotas per namespace: the records, their JSON
forms and which jobs a limit holds (no I/O).

A **limit** is named and matches a key of a job: the host of its ``http``
target (``{"host": "billing.internal"}``), the queue of its ``sqs`` target
(``{"queue_url": ...}``), one of its labels (``{"label": "team:pay"}``) or
its namespace (``{"namespace": "pay"}``). It caps the starts of the
attempts it holds, cluster-wide: ``rate`` (starts per second: never more
than ``rate`` in any second, ``rate < 1`` read as one start per ``1/rate``
seconds), ``burst`` (optional: a token bucket of that size refilled at
``rate``, to spread the starts within the second) and ``concurrency``
(attempts in flight at once). ``managed_by`` (optional) names the tool that
manages it: ``jobs apply`` writes ``apply`` and prunes only those.

A **quota** belongs to a namespace: ``max_jobs`` (refused at create), and
``fires_per_second`` / ``concurrent_runs``, carried out as a limit keyed by
the namespace (``quota_limit``), by the same machinery as the others.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cronman.errors import ValidationError

MATCH_KINDS = ("host", "queue_url", "label", "namespace")
# What the API adds to a limit's JSON: not part of its definition.
STATE_KEYS = ("version", "usage", "waiting")
LIMIT_NAME_PATTERN = "^[a-z0-9][a-z0-9_.-]{0,62}$"
LIMIT_NAME_RE = re.compile(LIMIT_NAME_PATTERN.replace("$", r"\Z"))
# What each kind of match takes (the OpenAPI document states the same
# patterns): a host without scheme, port, path or blanks; a label key:value;
# a queue URL or namespace with something other than blanks.
_BLANK = "\t\n\r \u0000"
MATCH_PATTERNS = {
    "host": f"^[^/{_BLANK}]*[^/.{_BLANK}][^/{_BLANK}]*$",
    "queue_url": f"^[^\u0000]*[^{_BLANK}][^\u0000]*$",
    "label": "^[^:\u0000]+:[^\u0000]*$",
    "namespace": f"^[^\u0000]*[^{_BLANK}][^\u0000]*$",
}
_MATCH_RES = {kind: re.compile(p.replace("$", r"\Z")) for kind, p in MATCH_PATTERNS.items()}
_MATCH_HINTS = {"host": "a host name or address (no scheme, port, path or blanks)",
                "queue_url": "a queue URL", "label": "key:value (a job label)",
                "namespace": "a namespace"}
# The name a namespace's quota takes as a limit; user limits cannot have it
# (their names have no ``:``).
QUOTA_PREFIX = "quota:"
MAX_RATE = 100_000.0
MAX_CONCURRENCY = 1_000_000
MAX_MATCH_VALUE = 2048
MAX_JOBS_QUOTA = 10_000_000
QUOTA_FIELDS = ("max_jobs", "fires_per_second", "burst", "concurrent_runs")
LIMIT_FIELDS = ("name", "match", "rate", "burst", "concurrency", "managed_by")
MANAGED_BY_PATTERN = "^[a-z0-9][a-z0-9_.-]{0,31}$"
MANAGED_BY_RE = re.compile(MANAGED_BY_PATTERN.replace("$", r"\Z"))


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit: what it matches and what it allows."""

    name: str
    kind: str  # one of MATCH_KINDS
    value: str
    rate: float | None = None
    burst: int | None = None
    concurrency: int | None = None
    version: int = 1
    managed_by: str | None = None

    @property
    def window_ms(self) -> int:
        """The window the rate counts starts in: a second, or ``1/rate`` s below 1/s."""
        if self.rate is None:
            return 0
        return max(1000, int(round(self.count * 1000 / self.rate)))

    @property
    def count(self) -> int:
        """Starts allowed within ``window_ms``."""
        return 0 if self.rate is None else max(1, int(math.floor(self.rate)))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "match": {self.kind: self.value}}
        if self.rate is not None:
            out["rate"] = self.rate
        if self.burst is not None:
            out["burst"] = self.burst
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.managed_by is not None:
            out["managed_by"] = self.managed_by
        return out

    def describe(self) -> str:
        parts = []
        if self.rate is not None:
            parts.append(f"{self.rate:g}/s" + (f" (burst {self.burst})" if self.burst else ""))
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        return f"{self.name} on {self.kind} {self.value}: {', '.join(parts)}"


@dataclass(frozen=True, slots=True)
class Quota:
    """A namespace's quota; None: no bound."""

    namespace: str
    max_jobs: int | None = None
    fires_per_second: float | None = None
    burst: int | None = None
    concurrent_runs: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "max_jobs": self.max_jobs,
                "fires_per_second": self.fires_per_second, "burst": self.burst,
                "concurrent_runs": self.concurrent_runs}


def quota_limit(quota: Quota) -> Limit | None:
    """The limit that carries out the quota's fires per second and concurrent
    runs (None when it bounds neither)."""
    if quota.fires_per_second is None and quota.concurrent_runs is None:
        return None
    return Limit(name=QUOTA_PREFIX + quota.namespace, kind="namespace", value=quota.namespace,
                 rate=quota.fires_per_second, burst=quota.burst,
                 concurrency=quota.concurrent_runs)


# -- parsing ------------------------------------------------------------------


def _positive_number(value: Any, field: str, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError("must be a number", field=field)
    if value <= 0 or value > hi:
        raise ValidationError(f"must be above 0 and at most {hi:g}", field=field)
    return float(value)


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("must be an integer", field=field)
    if value < lo or value > hi:
        raise ValidationError(f"must be between {lo} and {hi}", field=field)
    return value


def _positive_int(value: Any, field: str, hi: int) -> int:
    return _int(value, field, 1, hi)


_ABSENT = object()


def _optional(obj: Mapping[str, Any], key: str) -> Any:
    """The value given for ``key`` (``_ABSENT`` when left out; null is a bad value)."""
    return obj.get(key, _ABSENT)


def parse_match(value: Any) -> tuple[str, str]:
    """(kind, value) of a limit's ``match`` object."""
    if not isinstance(value, dict):
        raise ValidationError("must be an object with one of the keys "
                              + ", ".join(MATCH_KINDS), field="match")
    for kind in value:
        if kind not in MATCH_KINDS:
            raise ValidationError(f"unknown key {kind!r}: one of " + ", ".join(MATCH_KINDS),
                                  field=f"match.{kind}")
    if len(value) != 1:
        raise ValidationError("must have exactly one of the keys " + ", ".join(MATCH_KINDS),
                              field="match")
    ((kind, raw),) = value.items()
    field = f"match.{kind}"
    if not isinstance(raw, str):
        raise ValidationError("must be a string", field=field)
    if len(raw) > MAX_MATCH_VALUE:
        raise ValidationError(f"must be at most {MAX_MATCH_VALUE} characters", field=field)
    if not _MATCH_RES[kind].match(raw):
        raise ValidationError(f"must be {_MATCH_HINTS[kind]}", field=field)
    if kind == "host":
        raw = raw.lower().rstrip(".")
    return kind, raw


def parse_limit(body: Any, *, name: str | None = None, version: int = 1) -> Limit:
    """A limit from its JSON body (``ValidationError`` naming the field);
    ``name``: the URL's, on an update."""
    if not isinstance(body, dict):
        raise ValidationError("the request body must be a JSON object")
    for key in body:
        if key not in LIMIT_FIELDS and not (key == "version" and name is not None):
            raise ValidationError(f"unknown field {key!r}", field=str(key))
    given = body.get("name", name)
    if name is not None and given != name:
        raise ValidationError("does not match the limit name of the URL", field="name")
    if not isinstance(given, str) or not LIMIT_NAME_RE.match(given):
        raise ValidationError("must be 1 to 63 characters: lower-case letters, digits, "
                              "'_', '.', '-', starting with a letter or digit", field="name")
    if "match" not in body:
        raise ValidationError("is required", field="match")
    kind, value = parse_match(body["match"])
    rate = _optional(body, "rate")
    burst = _optional(body, "burst")
    concurrency = _optional(body, "concurrency")
    rate_v = None if rate is _ABSENT else _positive_number(rate, "rate", MAX_RATE)
    burst_v = None if burst is _ABSENT else _positive_int(burst, "burst", MAX_CONCURRENCY)
    conc_v = (None if concurrency is _ABSENT
              else _positive_int(concurrency, "concurrency", MAX_CONCURRENCY))
    if rate_v is None and conc_v is None:
        raise ValidationError("a limit needs a rate, a concurrency, or both", field="rate")
    if burst_v is not None and rate_v is None:
        raise ValidationError("a burst needs a rate", field="burst")
    managed_by = body.get("managed_by")
    if managed_by is not None and (not isinstance(managed_by, str)
                                   or not MANAGED_BY_RE.match(managed_by)):
        raise ValidationError("must be 1 to 32 characters: lower-case letters, digits, "
                              "'_', '.', '-', starting with a letter or digit",
                              field="managed_by")
    return Limit(name=given, kind=kind, value=value, rate=rate_v, burst=burst_v,
                 concurrency=conc_v, version=version, managed_by=managed_by)


def parse_quota(namespace: str, body: Any) -> Quota:
    """A namespace's quota from its JSON body (a PUT: the fields given, the
    others unbounded)."""
    if not isinstance(body, dict):
        raise ValidationError("the request body must be a JSON object")
    for key in body:
        if key not in QUOTA_FIELDS and key != "namespace":
            raise ValidationError(f"unknown field {key!r}", field=str(key))
    if "namespace" in body and body["namespace"] != namespace:
        raise ValidationError("does not match the namespace of the URL", field="namespace")
    max_jobs = _optional(body, "max_jobs")
    fps = _optional(body, "fires_per_second")
    burst = _optional(body, "burst")
    conc = _optional(body, "concurrent_runs")
    fps_v = None if fps is _ABSENT else _positive_number(fps, "fires_per_second", MAX_RATE)
    burst_v = None if burst is _ABSENT else _positive_int(burst, "burst", MAX_CONCURRENCY)
    if burst_v is not None and fps_v is None:
        raise ValidationError("a burst needs fires_per_second", field="burst")
    jobs_v = None if max_jobs is _ABSENT else _int(max_jobs, "max_jobs", 0, MAX_JOBS_QUOTA)
    conc_v = None if conc is _ABSENT else _positive_int(conc, "concurrent_runs", MAX_CONCURRENCY)
    return Quota(namespace=namespace, max_jobs=jobs_v, fires_per_second=fps_v, burst=burst_v,
                 concurrent_runs=conc_v)


# -- matching -----------------------------------------------------------------


def job_keys(namespace: str, target: Mapping[str, Any], labels: Mapping[str, str] | None
             ) -> list[tuple[str, str]]:
    """The (kind, value) keys a job's fires may be limited on."""
    keys = [("namespace", namespace)]
    kind = target.get("kind")
    if kind == "http":
        host = urlsplit(str(target.get("url") or "")).hostname
        if host:
            keys.append(("host", host.lower().rstrip(".")))
    elif kind == "sqs":
        queue = target.get("queue_url")
        if queue:
            keys.append(("queue_url", str(queue)))
    for key, value in (labels or {}).items():
        keys.append(("label", f"{key}:{value}"))
    return keys


def target_host(target: Mapping[str, Any]) -> str | None:
    """The destination a forecast counts a fire against: the http target's
    host, the sqs queue, else the target's kind."""
    kind = target.get("kind")
    if kind == "http":
        return urlsplit(str(target.get("url") or "")).hostname or None
    if kind == "sqs":
        return str(target.get("queue_url") or "") or None
    return None if kind is None else str(kind)


class LimitIndex:
    """Limits by the key they match, for finding a job's limits quickly."""

    def __init__(self, limits: Iterable[Limit]) -> None:
        self.limits = sorted(limits, key=lambda lim: lim.name)
        self._by_key: dict[tuple[str, str], list[Limit]] = {}
        for lim in self.limits:
            self._by_key.setdefault((lim.kind, lim.value), []).append(lim)

    def __len__(self) -> int:
        return len(self.limits)

    def matching(self, namespace: str, target: Mapping[str, Any],
                 labels: Mapping[str, str] | None) -> tuple[Limit, ...]:
        """The limits a job's fires are held to, by name."""
        if not self._by_key:
            return ()
        found: dict[str, Limit] = {}
        for key in job_keys(namespace, target, labels):
            for lim in self._by_key.get(key, ()):
                found[lim.name] = lim
        return tuple(found[n] for n in sorted(found))
