"""A network namespace the fault suite makes for one node, joined to the
host by a veth pair: the node inside reaches PostgreSQL, Redis and the
receiver only through proxies the test runs on the host side of the pair,
so a partition (from one, some or all of them) is a proxy cutting its
connections. Only namespaces and links made here are touched, and they
are deleted afterwards (deleting the namespace deletes the pair).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.processes import clean_env

IP = "/usr/sbin/ip"


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True, timeout=10)


def free_subnet(start: int) -> int:
    """A /30 of 10.239.0.0/24 no address of this host is in (another run's
    namespace may hold one), trying from ``start`` on."""
    shown = subprocess.run([IP, "-4", "-o", "addr"], check=True, capture_output=True,
                           text=True, timeout=10).stdout
    for k in range(64):
        subnet = (start + k) % 64
        if f" 10.239.0.{subnet * 4 + 1}/" not in shown:
            return subnet
    raise RuntimeError("every chaos subnet of 10.239.0.0/24 is taken")


class Namespace:
    """``ip netns`` ``name`` with ``ns_ip`` inside and ``host_ip`` outside (a /30)."""

    def __init__(self, name: str, subnet: int) -> None:
        if not 0 <= subnet < 64:
            raise ValueError("subnet must be 0..63")
        self.name = name
        self.host_ip = f"10.239.{subnet * 4 // 256}.{subnet * 4 % 256 + 1}"
        self.ns_ip = f"10.239.{subnet * 4 // 256}.{subnet * 4 % 256 + 2}"
        self._host_link = f"cmc{os.getpid() % 100000}h{subnet}"[:15]
        self._ns_link = f"cmc{os.getpid() % 100000}n{subnet}"[:15]
        self.made = False
        self.forwarders: list[subprocess.Popen[bytes]] = []

    @property
    def prefix(self) -> tuple[str, ...]:
        return (IP, "netns", "exec", self.name)

    def create(self) -> Namespace:
        _ip("netns", "add", self.name)
        self.made = True
        _ip("link", "add", self._host_link, "type", "veth", "peer", "name", self._ns_link)
        _ip("link", "set", self._ns_link, "netns", self.name)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self._host_link)
        _ip("link", "set", self._host_link, "up")
        _ip("netns", "exec", self.name, IP, "addr", "add", f"{self.ns_ip}/30", "dev",
            self._ns_link)
        _ip("netns", "exec", self.name, IP, "link", "set", self._ns_link, "up")
        _ip("netns", "exec", self.name, IP, "link", "set", "lo", "up")
        return self

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
            self.made = False
