"""Settings: one typed, validated object per process, read from CRONMAN_* variables.

A CLI flag of the same name wins over the environment (``Settings.from_env(overrides)``).
Every default is a named constant below.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from cronman import host_policy
from cronman.eventloop import DEFAULT_EVENT_LOOP, EVENT_LOOPS
from cronman.host_policy import HostPolicy

DEFAULT_DATABASE_URL = "sqlite:///cronman.db"
DEFAULT_REPLICAS = 2
DEFAULT_HEARTBEAT_TTL = 30.0
DEFAULT_HISTORY_RETENTION_DAYS = 45
DEFAULT_API_BIND = "127.0.0.1:8080"
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_SYNC_POLL_INTERVAL = 2.0
DEFAULT_MAX_IN_FLIGHT = 2000
DEFAULT_PARTITIONS_AHEAD_DAYS = 7
DEFAULT_REDIS_KEY_PREFIX = "cronman"
DEFAULT_MAX_CLOCK_SKEW = 1.0
DEFAULT_DISPATCH_TICK_MS = 10
MAX_DISPATCH_TICK_MS = 100
# CRONMAN_AUTH: unset means "required once a token has been created, or when
# the API listens beyond loopback" (see cronman.api.auth).
AUTH_REQUIRED = "required"
AUTH_OFF = "off"
AUTH_MODES = (AUTH_REQUIRED, AUTH_OFF)
DEFAULT_CONTAINERD_ADDRESS = "/run/containerd/containerd.sock"
DEFAULT_CONTAINERD_NAMESPACE = "cronman"
DEFAULT_AGENT_SLOTS = 64
DEFAULT_AGENT_PLACEMENT_TIMEOUT = 60.0
DEFAULT_AGENT_STATE_DIR = "/run/cronman-agent"
DEFAULT_SMTP_PORT = 587
DEFAULT_NOTIFY_POLL_INTERVAL = 2.0
DEFAULT_NOTIFY_MAX_ATTEMPTS = 10
# The floor on a namespace token's schedules and retries, in seconds
# (cronman.api.schedule_floor); 0 turns it off.
DEFAULT_MIN_INTERVAL = 1.0
DEFAULT_CLAIM_WAIT_MAX = 30.0
DEFAULT_API_LONG_POLLS = 2

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    """Configuration of one cronman process (see README, "Configuration")."""

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    node_id: str = field(default_factory=default_node_id)
    replicas: int = DEFAULT_REPLICAS
    heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL
    history_retention_days: int = DEFAULT_HISTORY_RETENTION_DAYS
    signing_secret: str | None = None
    allow_private_targets: bool = False
    api_bind: str = DEFAULT_API_BIND
    auth: str | None = None
    min_interval: float = DEFAULT_MIN_INTERVAL
    # Origins besides the API's own whose browser pages may write (comma-separated
    # scheme://host[:port]; see cronman.api.origins).
    allowed_origins: str | None = None
    # DNS names an API that needs no token may be reached by, besides loopback
    # names and addresses (comma-separated; see cronman.api.origins).
    allowed_hosts: str | None = None
    # Work queues: the longest a claim's long-poll waits (seconds; 0: claims
    # answer at once), and how many long-polls one API process holds at once
    # (beyond them a claim answers at once, so they never take every thread).
    claim_wait_max: float = DEFAULT_CLAIM_WAIT_MAX
    api_long_polls: int = DEFAULT_API_LONG_POLLS
    # The API's URL as receivers reach it (http/https, no query): the base of
    # the completion and heartbeat URLs an http target with "completion":
    # "callback" sends; such targets need it (on the API and on the nodes).
    public_url: str | None = None
    # Tuning knobs, not part of the public contract (documented in README).
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    sync_poll_interval: float = DEFAULT_SYNC_POLL_INTERVAL
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    dispatch_tick_ms: int = DEFAULT_DISPATCH_TICK_MS
    partitions_ahead_days: int = DEFAULT_PARTITIONS_AHEAD_DAYS
    redis_key_prefix: str = DEFAULT_REDIS_KEY_PREFIX
    max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW
    event_loop: str = DEFAULT_EVENT_LOOP
    # Worker agent (``cronman agent``) and container placement.
    agent_id: str = field(default_factory=default_node_id)
    agent_labels: str | None = None  # "k=v,k=v", matched by a container target's selector
    agent_cpu: float | None = None  # cores offered; None: the host's
    agent_memory_mb: int | None = None  # MiB offered; None: the host's
    agent_slots: int = DEFAULT_AGENT_SLOTS  # containers at once
    agent_placement_timeout: float = DEFAULT_AGENT_PLACEMENT_TIMEOUT
    agent_state_dir: str = DEFAULT_AGENT_STATE_DIR  # the runtimes' kept container output
    # What a run may ask of its host (cronman.host_policy, JSON): every
    # namespace's default grant, and the most this worker agent runs.
    host_policy: str | None = None
    agent_host_policy: str | None = None
    containerd_address: str = DEFAULT_CONTAINERD_ADDRESS
    containerd_namespace: str = DEFAULT_CONTAINERD_NAMESPACE
    # Notifications (cronman.notify): the outgoing mail server, and the notifier.
    smtp_host: str | None = None
    smtp_port: int = DEFAULT_SMTP_PORT
    smtp_starttls: bool = True
    smtp_username: str | None = None
    smtp_password: str | None = field(default=None, repr=False)
    smtp_from: str | None = None
    notify: bool = True
    notify_poll_interval: float = DEFAULT_NOTIFY_POLL_INTERVAL
    notify_max_attempts: int = DEFAULT_NOTIFY_MAX_ATTEMPTS

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("CRONMAN_REPLICAS must be >= 1")
        if self.heartbeat_ttl <= 0:
            raise ValueError("CRONMAN_HEARTBEAT_TTL must be > 0")
        if self.history_retention_days < 1:
            raise ValueError("CRONMAN_HISTORY_RETENTION_DAYS must be >= 1")
        if self.lease_seconds <= 0:
            raise ValueError("CRONMAN_LEASE_SECONDS must be > 0")
        if self.max_clock_skew <= 0:
            raise ValueError("CRONMAN_MAX_CLOCK_SKEW must be > 0")
        # Well under a second: a node's pulse says it is stalled when its
        # dispatch stands still for one (pulse.STALL_MS).
        if not 0 <= self.dispatch_tick_ms <= MAX_DISPATCH_TICK_MS:
            raise ValueError(f"CRONMAN_DISPATCH_TICK_MS must be between 0 and "
                             f"{MAX_DISPATCH_TICK_MS}")
        if ":" not in self.api_bind:
            raise ValueError("CRONMAN_API_BIND must be host:port")
        if self.event_loop not in EVENT_LOOPS:
            raise ValueError(f"CRONMAN_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)}")
        if not 0 <= self.min_interval <= 86_400:
            raise ValueError("CRONMAN_MIN_INTERVAL must be between 0 and 86400 seconds")
        if self.auth is not None and self.auth not in AUTH_MODES:
            raise ValueError(f"CRONMAN_AUTH must be one of {', '.join(AUTH_MODES)} "
                             f"(or unset), not {self.auth!r}")
        if self.agent_cpu is not None and self.agent_cpu <= 0:
            raise ValueError("CRONMAN_AGENT_CPU must be > 0")
        if self.agent_memory_mb is not None and self.agent_memory_mb <= 0:
            raise ValueError("CRONMAN_AGENT_MEMORY_MB must be > 0")
        if self.agent_slots < 1:
            raise ValueError("CRONMAN_AGENT_SLOTS must be >= 1")
        if self.agent_placement_timeout <= 0:
            raise ValueError("CRONMAN_AGENT_PLACEMENT_TIMEOUT must be > 0")
        parse_labels(self.agent_labels)
        if self.public_url is not None:
            object.__setattr__(self, "public_url", parse_public_url(self.public_url))
        parse_origins(self.allowed_origins)
        parse_hosts(self.allowed_hosts)
        _ = self.host_policy_default  # read now: a bad policy fails at start
        self.agent_policy(process_runtime=True)
        if not 0 < self.smtp_port < 65536:
            raise ValueError("CRONMAN_SMTP_PORT must be a TCP port (1-65535)")
        if self.smtp_username and not self.smtp_starttls:
            # Fail closed: credentials never cross the network in the clear.
            raise ValueError("CRONMAN_SMTP_USERNAME needs CRONMAN_SMTP_STARTTLS=true")
        if bool(self.smtp_username) != bool(self.smtp_password):
            raise ValueError("CRONMAN_SMTP_USERNAME and CRONMAN_SMTP_PASSWORD go together")
        if self.notify_poll_interval <= 0:
            raise ValueError("CRONMAN_NOTIFY_POLL_INTERVAL must be > 0")
        if self.notify_max_attempts < 1:
            raise ValueError("CRONMAN_NOTIFY_MAX_ATTEMPTS must be >= 1")

    @property
    def host_policy_default(self) -> HostPolicy:
        """Every namespace's grant unless an admin set its own (CRONMAN_HOST_POLICY)."""
        return host_policy.parse(self.host_policy, name="CRONMAN_HOST_POLICY")

    def agent_policy(self, *, process_runtime: bool) -> HostPolicy:
        """The most this worker agent runs (CRONMAN_AGENT_HOST_POLICY). On the
        ``process`` runtime, ``process`` defaults to true: choosing that runtime
        is the operator's consent to run commands on the host (for namespaces
        whose grant allows it)."""
        base = HostPolicy(process=True) if process_runtime else host_policy.DEFAULT
        return host_policy.parse(self.agent_host_policy, name="CRONMAN_AGENT_HOST_POLICY",
                                 base=base)

    @property
    def agent_label_map(self) -> dict[str, str]:
        return parse_labels(self.agent_labels)

    @property
    def allowed_origin_set(self) -> frozenset[str]:
        return frozenset(parse_origins(self.allowed_origins))

    @property
    def allowed_host_set(self) -> frozenset[str]:
        return frozenset(parse_hosts(self.allowed_hosts))

    @property
    def api_on_loopback(self) -> bool:
        """Whether ``api_bind`` names a loopback address (or a Unix socket) only."""
        return is_loopback_bind(self.api_bind)

    @property
    def redis_urls(self) -> list[str]:
        if not self.redis_url:
            return []
        if self.redis_url.startswith("redis+sentinel://"):
            return [self.redis_url]  # one Sentinel URL lists several sentinel hosts
        return [u.strip() for u in self.redis_url.split(",") if u.strip()]

    @classmethod
    def from_env(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        **defaults: Any,
    ) -> Settings:
        """Settings from ``CRONMAN_<NAME>`` variables; ``overrides`` (CLI flags) win.

        ``defaults`` replace the built-in defaults (``standalone`` allows private
        targets by default, for instance) but not the environment.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = dict(defaults)
        for f in fields(cls):
            raw = env.get(f"CRONMAN_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _convert(f.name, f.type, raw)
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = value
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def is_loopback_bind(bind: str) -> bool:
    """Whether a ``host:port`` (or gunicorn ``unix:PATH``) listens on loopback only.

    Only literal loopback addresses and ``localhost`` count; any other name,
    an empty host and the wildcard addresses do not (fail closed).
    """
    if bind.startswith("unix:"):
        return True
    host = bind.rpartition(":")[0].strip().strip("[]")
    if host.lower() == "localhost":
        return True
    return is_loopback_address(host)


def is_loopback_address(host: str) -> bool:
    """Whether ``host`` is a loopback IP address literal."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
def parse_public_url(text: str) -> str | None:
    """CRONMAN_PUBLIC_URL without its trailing slash (None when empty);
    ValueError for anything but an http(s) URL with a host and no query,
    fragment or credentials."""
    url = text.strip().rstrip("/")
    if not url:
        return None
    parts = urlsplit(url)
    if (origin_of(url) is None or parts.query or parts.fragment or "?" in url or "#" in url
            or any(c.isspace() for c in url)):
        raise ValueError(f"CRONMAN_PUBLIC_URL: {text!r} is not an http(s) URL "
                         "(scheme://host[:port][/path], no query, fragment or credentials)")
    return url


def parse_labels(text: str | None) -> dict[str, str]:
    """``k=v,k=v`` (CRONMAN_AGENT_LABELS) as a dict; ValueError when malformed."""
    labels: dict[str, str] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"CRONMAN_AGENT_LABELS: {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels


def origin_of(url: str) -> str | None:
    """The origin of an http(s) URL as ``scheme://host[:port]`` (lower case, the
    scheme's default port left out, IPv6 in brackets); None for anything else."""
    try:
        parts = urlsplit(url.strip())
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:
        return None
    default = {"http": 80, "https": 443}.get(scheme)
    if default is None or not host or parts.username is not None or parts.password is not None:
        return None
    host = host.rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def parse_origins(text: str | None) -> list[str]:
    """``https://a.example,http://b:8080`` (CRONMAN_ALLOWED_ORIGINS), normalised;
    ValueError for anything but bare http(s) origins (no wildcard, no path)."""
    out: list[str] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        origin = origin_of(item)
        if origin is None or urlsplit(item).path not in ("", "/") or "?" in item or "#" in item:
            raise ValueError(f"CRONMAN_ALLOWED_ORIGINS: {item!r} is not an origin "
                             "(scheme://host[:port], http or https, nothing after it)")
        out.append(origin)
    return out


_HOST_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def parse_hosts(text: str | None) -> list[str]:
    """``cronman,api.example.org`` (CRONMAN_ALLOWED_HOSTS): DNS names, lower case,
    without a trailing dot; ValueError for anything else (a port, a scheme, a
    wildcard: a name is allowed exactly, not its subdomains)."""
    out: list[str] = []
    for item in (text or "").split(","):
        name = item.strip().lower().removesuffix(".")
        if not name:
            continue
        if len(name) > 253 or not all(_HOST_LABEL.fullmatch(p) for p in name.split(".")):
            raise ValueError(f"CRONMAN_ALLOWED_HOSTS: {item.strip()!r} is not a host name "
                             "(no scheme, port or wildcard)")
        out.append(name)
    return out


def _convert(name: str, type_name: Any, raw: str) -> Any:
    if name == "auth":
        return raw.strip().lower() or None
    t = str(type_name)
    try:
        if t.startswith("bool"):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(raw)
        if t.startswith("int"):
            return int(raw)
        if t.startswith("float"):
            return float(raw)
    except ValueError:
        raise ValueError(f"CRONMAN_{name.upper()}: cannot read {raw!r} as {t}") from None
    if t.startswith("str | None"):
        return raw or None
    return raw
