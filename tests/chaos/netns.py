"""A network namespace the fault suite makes for one node, joined to the
host by one veth pair per backend (the receiver, Redis, PostgreSQL): the
node inside reaches each only over its own link, through a proxy the test
runs on the host side of it (where slow and lossy links are made). A
partition takes links down: the host end of a pair set down, so whatever
the node sends over it is dropped without an answer (connections hang,
new ones time out), as when a cable or a switch port dies; bringing it up
heals it, and TCP carries on what it had not yet delivered.

Only namespaces, links and routes made here are touched, and they are
deleted afterwards (deleting the namespace deletes the pairs; a blackhole
route per link keeps the host's packets for a link that is down from
taking its default route).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import clean_env

IP = "/usr/sbin/ip"
SUBNETS = 64  # /30s of 10.239.0.0/24


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True, timeout=10)


def free_subnets(count: int, start: int) -> list[int]:
    """``count`` /30s of 10.239.0.0/24 no address of this host is in
    (another run's namespace may hold some), trying from ``start`` on."""
    shown = subprocess.run([IP, "-4", "-o", "addr"], check=True, capture_output=True,
                           text=True, timeout=10).stdout
    free = [s for k in range(SUBNETS) if f" {_addr(s := (start + k) % SUBNETS, 1)}/" not in shown]
    if len(free) < count:
        raise RuntimeError(f"{count} chaos subnets of 10.239.0.0/24 are not free")
    return free[:count]


def _addr(subnet: int, host: int) -> str:
    return f"10.239.{subnet * 4 // 256}.{subnet * 4 % 256 + host}"


@dataclass(frozen=True)
class Link:
    """One veth pair: ``host_ip`` on the host end, ``ns_ip`` inside."""

    name: str
    subnet: int
    host_dev: str
    ns_dev: str

    @property
    def host_ip(self) -> str:
        return _addr(self.subnet, 1)

    @property
    def ns_ip(self) -> str:
        return _addr(self.subnet, 2)

    @property
    def network(self) -> str:
        return f"{_addr(self.subnet, 0)}/30"


class Namespace:
    """``ip netns`` ``name`` with a link per name of ``subnets`` (name -> /30)."""

    def __init__(self, name: str, subnets: Mapping[str, int]) -> None:
        if not all(0 <= s < SUBNETS for s in subnets.values()):
            raise ValueError(f"subnets must be 0..{SUBNETS - 1}")
        self.name = name
        tag = f"cmc{os.getpid() % 100000}"
        self.links = {link: Link(link, s, f"{tag}h{s}"[:15], f"{tag}n{s}"[:15])
                      for link, s in subnets.items()}
        self.made = False
        self.down: set[str] = set()
        self.forwarders: list[subprocess.Popen[bytes]] = []

    @property
    def prefix(self) -> tuple[str, ...]:
        return (IP, "netns", "exec", self.name)

    def create(self) -> Namespace:
        _ip("netns", "add", self.name)
        self.made = True
        self._inside("link", "set", "lo", "up")
        for link in self.links.values():
            _ip("link", "add", link.host_dev, "type", "veth", "peer", "name", link.ns_dev)
            _ip("link", "set", link.ns_dev, "netns", self.name)
            _ip("addr", "add", f"{link.host_ip}/30", "dev", link.host_dev)
            _ip("route", "add", "blackhole", link.network, "metric", "4000")
            _ip("link", "set", link.host_dev, "up")
            self._inside("addr", "add", f"{link.ns_ip}/30", "dev", link.ns_dev)
            self._inside("link", "set", link.ns_dev, "up")
            # The host end's address fixed inside: with the link down, packets
            # are sent and lost (no ARP failing into "no route to host").
            host_mac = Path(f"/sys/class/net/{link.host_dev}/address").read_text().strip()
            self._inside("neigh", "replace", link.host_ip, "lladdr", host_mac, "dev",
                         link.ns_dev, "nud", "permanent")
        return self

    def _inside(self, *args: str) -> None:
        _ip("netns", "exec", self.name, IP, *args)

    def cut(self, names: Iterable[str]) -> None:
        """Take the links ``names`` down (their host ends)."""
        for name in names:
            _ip("link", "set", self.links[name].host_dev, "down")
            self.down.add(name)

    def heal(self, names: Iterable[str] | None = None) -> None:
        """Bring the links ``names`` (default: every one down) up again."""
        for name in list(self.down if names is None else names):
            _ip("link", "set", self.links[name].host_dev, "up")
            self.down.discard(name)

    def forward(self, ports: Mapping[int, tuple[str, int]], log: Path) -> None:
        """Inside the namespace, each 127.0.0.1:``port`` forwarded to its
        (host, port), by one process (the jobs' receiver URL and the
        sentinels' answers name loopback ports: the node inside finds them)."""
        cmd = [*self.prefix, sys.executable, "-c", "from tests.chaos.proxy import main; main()"]
        for port, to in ports.items():
            cmd += ["127.0.0.1", str(port), to[0], str(to[1])]
        env = clean_env({"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        with open(log, "ab") as out:
            self.forwarders.append(subprocess.Popen(cmd, env=env, stdout=out,
                                                    stderr=subprocess.STDOUT))

    def delete(self) -> None:
        for p in self.forwarders:
            if p.poll() is None:
                p.kill()
                p.wait(5)
        if self.made:
            subprocess.run([IP, "netns", "del", self.name], capture_output=True, timeout=10)
            for link in self.links.values():
                subprocess.run([IP, "route", "del", "blackhole", link.network, "metric", "4000"],
                               capture_output=True, timeout=10)
            self.made = False
