"""The one place that turns ``CRONMAN_DATABASE_URL`` into connections.

Every process takes the same URL: the SQLAlchemy engine (API, nodes,
``cronman migrate``) and the raw psycopg2 connections outside its pool (the
change feed's LISTEN, the notifier's and the exporter's advisory locks, the
exporter's slot) get their libpq parameters from here, so whatever form the
URL is written in reaches libpq whole.

Forms accepted for PostgreSQL (``postgresql://`` means psycopg2):

- one host: ``postgresql+psycopg2://u:pw@h:5432/db``
- libpq's multi-host netloc: ``postgresql://u@h1:5432,h2:5433/db``
- repeated hosts: ``...@/db?host=h1:5432&host=h2:5433`` (``[v6]:port``, socket dirs)
- host and port lists: ``...@/db?host=h1,h2&port=5432,5433``

They are rewritten to the last form (``normalise_url``), which SQLAlchemy's
dialect and libpq read the same way. Any other query option is a libpq
keyword passed as is (``sslmode``, ``connect_timeout``...): the URL's own
values win over cronman's defaults.

Every connection cronman opens writes, or (the change feed) must hear what
is written: ``target_session_attrs`` is ``read-write`` unless the URL says
``primary``; anything else is refused. With several hosts libpq then tries
each until one accepts writes, so a reconnect after a failover lands on the
new primary and a replica is never used.

``MemberWatch`` records which member (host:port, as libpq connected) a
process's new connections land on, and when that changed.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

import psycopg2
import psycopg2.extensions
from sqlalchemy.dialects.postgresql.psycopg2 import PGDialect_psycopg2
from sqlalchemy.engine import URL, make_url

from cronman.store.records import Member

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5  # libpq applies it to each host in turn
WRITER_SESSION_ATTRS = ("read-write", "primary")
# A host that vanishes (no RST) is noticed in ~25 s instead of the kernel's hours.
KEEPALIVES: Mapping[str, str] = {"keepalives": "1", "keepalives_idle": "10",
                                 "keepalives_interval": "5", "keepalives_count": "3"}

# scheme://[userinfo@]hostlist[/path][?query]: hostlist with a comma is libpq's netloc form.
_NETLOC = re.compile(r"^(?P<scheme>[A-Za-z][\w+.-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)$",
                     re.DOTALL)
_DIALECT = PGDialect_psycopg2()  # type: ignore[no-untyped-call]


def _dialect_args(url: URL) -> tuple[list[str], dict[str, Any]]:
    """What SQLAlchemy's psycopg2 dialect hands ``psycopg2.connect`` for ``url``."""
    args, kwargs = _DIALECT.create_connect_args(url)  # type: ignore[no-untyped-call]
    return list(args), dict(kwargs)


def normalise_url(database_url: str) -> URL:
    """The URL with the driver made explicit and several hosts written as
    ``host=h1,h2&port=p1,p2`` (ValueError for what cronman cannot use)."""
    url = make_url(_from_libpq_netloc(database_url))
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg2")
    if url.get_backend_name() not in ("postgresql", "sqlite"):
        raise ValueError(f"unsupported database URL {url.render_as_string(hide_password=True)!r}: "
                         "use postgresql+psycopg2:// or sqlite:///")
    if url.get_backend_name() != "postgresql":
        return url
    if url.get_driver_name() != "psycopg2":
        raise ValueError("PostgreSQL is supported through psycopg2 (postgresql+psycopg2://)")
    url = _hosts_in_query(url)
    attrs = url.query.get("target_session_attrs")
    if attrs is not None and attrs not in WRITER_SESSION_ATTRS:
        raise ValueError(f"target_session_attrs={attrs!r} in the database URL: cronman writes "
                         f"through every connection, so it must be "
                         f"{' or '.join(WRITER_SESSION_ATTRS)} (the default)")
    return url


def _from_libpq_netloc(database_url: str) -> str:
    """``scheme://u@h1:p1,h2:p2/db?q`` as ``scheme://u@/db?host=h1,h2&port=p1,p2&q``."""
    m = _NETLOC.match(database_url)
    if m is None or "," not in m.group("authority"):
        return database_url
    userinfo, at, hostlist = m.group("authority").rpartition("@")
    hosts, ports = _split_hosts(unquote(h) for h in hostlist.split(","))
    rest = m.group("rest")
    path, _, query = rest.partition("?")
    extra = f"host={_quote_list(hosts)}"
    if any(ports):
        extra += f"&port={','.join(ports)}"
    return (f"{m.group('scheme')}://{userinfo}{at}{path or '/'}?{extra}"
            f"{'&' + query if query else ''}")


def _split_hosts(tokens: Iterable[str]) -> tuple[list[str], list[str]]:
    pairs = [_split_host(t) for t in tokens]
    return [h for h, _ in pairs], [p for _, p in pairs]


def _quote_list(items: list[str]) -> str:
    return ",".join(quote(h, safe="/:@") for h in items)


def _split_host(token: str) -> tuple[str, str]:
    """``host:port``, ``[v6]:port``, ``[v6]``, a socket directory or a bare host."""
    if token.startswith("["):
        host, _, tail = token[1:].partition("]")
        return host, tail[1:] if tail.startswith(":") else ""
    if token.startswith(("/", "@")) or token.count(":") != 1:
        return token, ""
    host, _, port = token.partition(":")
    return host, port


def _hosts_in_query(url: URL) -> URL:
    raw = url.query.get("host")
    if raw is None:
        return url
    tokens = list(raw) if isinstance(raw, tuple) else raw.split(",")
    hosts, ports = _split_hosts(tokens)
    if any(ports) and "port" in url.query:
        raise ValueError("the database URL gives ports twice: write "
                         "host=h1:p1&host=h2:p2 or host=h1,h2&port=p1,p2")
    query: dict[str, str | tuple[str, ...]] = {**url.query, "host": ",".join(hosts)}
    given = url.query.get("port")
    if any(ports):
        query["port"] = ",".join(ports)
    elif given is not None:
        listed = list(given) if isinstance(given, tuple) else given.split(",")
        # libpq applies one port to every host; SQLAlchemy wants one per host.
        query["port"] = ",".join(listed * len(hosts) if len(listed) == 1 else listed)
    return url.set(query=query)


def libpq_params(url: URL, **defaults: str) -> dict[str, str]:
    """libpq keywords for a normalised PostgreSQL URL: the URL's own, then
    ``defaults`` where the URL is silent, ``target_session_attrs`` at least."""
    if url.get_backend_name() != "postgresql":
        raise ValueError("a libpq connection needs a postgresql:// database URL")
    args, kwargs = _dialect_args(url)
    params = {k: str(v) for k, v in kwargs.items() if v is not None}
    if args and args[0]:
        params.update(psycopg2.extensions.parse_dsn(args[0]))
    base = {"target_session_attrs": "read-write", "connect_timeout": str(CONNECT_TIMEOUT_S),
            **defaults}
    return {**base, **params}


def engine_connect_args(url: URL, application_name: str) -> dict[str, str]:
    """``connect_args`` for ``create_engine``: SQLAlchemy lays them over the
    URL's own, so only the defaults the URL does not set."""
    params = _dialect_args(url)[1]
    defaults = {"target_session_attrs": "read-write", "connect_timeout": str(CONNECT_TIMEOUT_S),
                "application_name": application_name, **KEEPALIVES}
    return {k: v for k, v in defaults.items() if k not in params}


def libpq_dsn(url: URL, **defaults: str) -> str:
    """``libpq_params`` as one conninfo string."""
    dsn: str = psycopg2.extensions.make_dsn(**libpq_params(url, **defaults))
    return dsn


def connect(database_url: str | URL, application_name: str, *, autocommit: bool = True,
            **defaults: str) -> psycopg2.extensions.connection:
    """A psycopg2 connection of its own (outside any pool) to the primary.

    Raises ``psycopg2.Error`` (OperationalError while no member accepts writes).
    """
    url = database_url if isinstance(database_url, URL) else normalise_url(database_url)
    conn = psycopg2.connect(libpq_dsn(url, application_name=application_name,
                                      **KEEPALIVES, **defaults))
    conn.autocommit = autocommit
    return conn


def member_of(dbapi_conn: Any) -> str:
    """``host:port`` of the member a psycopg2 connection landed on (as libpq
    connected: an address, a name or a socket directory)."""
    info = dbapi_conn.info
    host, port = str(info.host), info.port
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class MemberWatch:
    """The member a process's newest connection landed on; a change is logged."""

    def __init__(self, label: str = "database") -> None:
        self._label = label
        self._lock = threading.Lock()
        self._current: Member | None = None

    def saw(self, member: str) -> None:
        with self._lock:
            previous = self._current
            if previous is not None and previous.member == member:
                return
            self._current = Member(member, time.time())
        if previous is None:
            log.debug("%s: writing to %s", self._label, member)
        else:
            log.warning("%s: now writing to %s (was %s)", self._label, member, previous.member)

    def saw_connection(self, dbapi_conn: Any) -> None:
        try:
            self.saw(member_of(dbapi_conn))
        except (AttributeError, psycopg2.Error):  # not a libpq connection
            pass

    @property
    def current(self) -> Member | None:
        with self._lock:
            return self._current
