"""What a run may ask of the host it runs on (an operator's policy).

A ``HostPolicy`` says what the runs of a namespace (or, on a worker agent,
any run it is handed) may ask of their host:

- ``root``: run as root -- user ``root``, uid 0 or gid 0, as ``parse_user``
  (the parser the runtimes use) reads it. Off by default: a run names a
  non-root user, or runs as ``DEFAULT_UID:DEFAULT_GID`` (nobody). A user the
  parser cannot read is refused whatever the policy.
- ``networks``: the network modes a run may ask for. Default ``none`` only
  (loopback of its own); ``host`` shares the host's network, its loopback
  services included, past the private-address guard.
- ``process``: whether its runs may go to a ``process`` worker agent, which
  runs the command directly on the agent's host with no isolation at all
  (no network namespace, the host's filesystem). Off by default.

There are no privileged containers, added capabilities or mounts to ask for:
a container target has no such fields (unknown fields are refused).

The same type is checked by the API against the caller's namespace grant
(the keys an admin token set for the namespace over ``CRONMAN_HOST_POLICY``),
by the scheduler node placing each run against that grant again, and by
every worker agent against the grant the message carries and against its
own (``CRONMAN_AGENT_HOST_POLICY``), whatever the run's stored definition says.
``refusals`` works on any target that may name ``user`` and ``network`` (worker
targets will, too). A namespace's grant is stored partial (``grant_keys``:
only the keys an admin set) and read over the live default (``over``), so a
later narrowing of ``CRONMAN_HOST_POLICY`` reaches every key a grant leaves
out. Pure: the standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cronman.errors import ValidationError

#: The user a run runs as when its target names none (``nobody``).
DEFAULT_UID = 65534
DEFAULT_GID = 65534
NETWORKS = ("none", "host")
KEYS = ("root", "networks", "process")


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """What a run may ask of its host (see the module docstring)."""

    root: bool = False
    networks: frozenset[str] = field(default_factory=lambda: frozenset({"none"}))
    process: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "networks": sorted(self.networks), "process": self.process}

    def refusals(self, target: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(field, why) for each thing ``target`` asks that this policy refuses."""
        out: list[tuple[str, str]] = []
        user = target.get("user")
        try:
            root = asks_root(user)
        except ValueError as exc:
            out.append(("user", str(exc)))
        else:
            if root and not self.root:
                out.append(("user", f"{user!r} runs as root, which the host policy does not "
                                    "allow (ask an operator for a grant, or name a non-root "
                                    "uid)"))
        network = target.get("network") or "none"
        if network not in self.networks:
            out.append(("network", f"network {network!r} is not allowed by the host policy "
                                   f"(allowed: {', '.join(sorted(self.networks)) or 'none'})"))
        return out


DEFAULT = HostPolicy()
#: Everything allowed: what an admin token (or an API without auth) may ask.
UNRESTRICTED = HostPolicy(root=True, networks=frozenset(NETWORKS), process=True)


def parse_user(user: str | None) -> tuple[int, int]:
    """(uid, gid) of a target's ``user``: ``"root"``, ``"nobody"``, ``"uid"``
    or ``"uid:gid"`` (gid defaults to uid); None gives ``DEFAULT_UID:DEFAULT_GID``.
    ``ValueError`` for anything else. The one reading of ``user``: the runtimes
    run as what it returns, and the policies call root what it makes 0."""
    if user is None:
        return DEFAULT_UID, DEFAULT_GID
    if not isinstance(user, str):
        raise ValueError(f"user {user!r} is not root, nobody, uid or uid:gid")
    value = user.strip()
    if value == "root":
        return 0, 0
    if value == "nobody":
        return DEFAULT_UID, DEFAULT_GID
    uid_text, _, gid_text = value.partition(":")
    try:
        uid = int(uid_text)
        gid = int(gid_text) if gid_text else uid
    except ValueError:
        raise ValueError(f"user {user!r} is not root, nobody, uid or uid:gid") from None
    if uid < 0 or gid < 0:
        raise ValueError(f"user {user!r}: ids must not be negative")
    return uid, gid


def asks_root(user: Any) -> bool:
    """Whether a target's ``user`` runs as root (uid 0 or gid 0, as
    ``parse_user`` reads it); ``ValueError`` when it cannot be read."""
    return 0 in parse_user(user)


def from_dict(value: Any, *, base: HostPolicy = DEFAULT) -> HostPolicy:
    """A policy from its JSON form; keys left out keep ``base``'s values.
    ``ValidationError`` naming the key for anything else."""
    if not isinstance(value, dict):
        raise ValidationError("must be an object with root, networks and process")
    for key in value:
        if key not in KEYS:
            raise ValidationError(f"unknown field {key!r} (allowed: {', '.join(KEYS)})",
                                  field=str(key))
    root = value.get("root", base.root)
    process = value.get("process", base.process)
    for name, flag in (("root", root), ("process", process)):
        if not isinstance(flag, bool):
            raise ValidationError("must be true or false", field=name)
    networks = value.get("networks", sorted(base.networks))
    if not isinstance(networks, list) or not all(isinstance(n, str) for n in networks):
        raise ValidationError("must be a list of network modes", field="networks")
    for i, name in enumerate(networks):
        if name not in NETWORKS:
            raise ValidationError(f"must be one of: {', '.join(NETWORKS)}",
                                  field=f"networks[{i}]")
        if name in networks[:i]:
            raise ValidationError(f"{name!r} is listed twice", field=f"networks[{i}]")
    return HostPolicy(root=root, networks=frozenset(networks), process=process)


def grant_keys(value: Any) -> dict[str, Any]:
    """A namespace's grant as an admin sets it: only the keys given, checked
    (``ValidationError`` naming the key) and in their JSON form."""
    checked = from_dict(value).to_dict()
    return {key: checked[key] for key in KEYS if key in value}


def over(own: Mapping[str, Any] | None, default: HostPolicy) -> HostPolicy:
    """A namespace's policy: the keys its own grant sets (None: it has none)
    over the operator's live default. The one place that decides it."""
    return default if own is None else from_dict(dict(own), base=default)


def parse(text: str | None, *, name: str, base: HostPolicy = DEFAULT) -> HostPolicy:
    """A policy from an environment variable's JSON (unset or empty: ``base``);
    ``ValueError`` naming the variable when it cannot be read."""
    if not text or not text.strip():
        return base
    try:
        return from_dict(json.loads(text), base=base)
    except (ValueError, ValidationError) as exc:
        why = exc.message if isinstance(exc, ValidationError) else str(exc)
        where = f" ({exc.field})" if isinstance(exc, ValidationError) and exc.field else ""
        raise ValueError(f"{name}: {why}{where}") from None
