"""ops/patroni/ holds what the docs promise and what the failover tests run.

Without starting Patroni: the member files parse and carry the settings of
docs/cluster.md (synchronous mode, the timing rule, pg_rewind, logical WAL,
hot_standby_feedback), their dynamic settings include every one the test
cluster (cronman_bench/patroni.py, shared with the benchmark) runs with, the
audit slot file declares cronman's slot, the env file's URL reaches libpq as every member with
``target_session_attrs=read-write``, and ``patroni --validate-config``
accepts each member (its addresses moved to loopback: the validator connects
to them).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cronman.audit.settings import DEFAULT_SLOT
from cronman.store.connect import libpq_params, normalise_url
from tests.support.patroni import PG_BIN, Member, PatroniCluster
from tests.support.processes import free_port

OPS = Path(__file__).resolve().parents[2] / "ops" / "patroni"
MEMBERS = sorted(OPS.glob("pg*.yml"))
PATRONI = "/usr/bin/patroni"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


def env_file(path: Path) -> dict[str, str]:
    """KEY=value lines as systemd's EnvironmentFile reads them (one level of quotes)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = shlex.split(value)[0] if value else ""
    return out


def is_subset(part: Any, whole: Any) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and is_subset(v, whole[k])
                                               for k, v in part.items())
    return bool(part == whole)


@pytest.fixture(scope="module")
def harness_dcs() -> Iterator[dict[str, Any]]:
    """The bootstrap.dcs the failover tests' cluster runs with."""
    cluster = PatroniCluster(members=1)
    cluster.etcd_port = free_port()
    try:
        member = Member("m1", free_port(), free_port(), cluster.dir / "m1",
                        cluster.dir / "m1.yml", cluster.dir / "m1.pid")
        yield yaml.safe_load(cluster._config(member))["bootstrap"]["dcs"]
    finally:
        cluster.close()


def test_there_are_members_to_fail_over_to():
    assert len(MEMBERS) >= 2, MEMBERS
    configs = [load(p) for p in MEMBERS]
    assert len({c["scope"] for c in configs}) == 1
    assert len({c["name"] for c in configs}) == len(configs)


@pytest.mark.parametrize("path", MEMBERS, ids=lambda p: p.name)
def test_member_settings(path, harness_dcs):
    config = load(path)
    dcs = config["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True
    ttl, loop_wait, retry = dcs["ttl"], dcs["loop_wait"], dcs["retry_timeout"]
    assert (ttl, loop_wait, retry) == (10, 2, 4)
    assert loop_wait + 2 * retry <= ttl  # Patroni's rule: a leader renews before its key expires
    pg = dcs["postgresql"]
    assert pg["use_pg_rewind"] is True
    assert pg["parameters"]["wal_level"] == "logical"
    assert pg["parameters"]["hot_standby_feedback"] == "on"
    assert pg["parameters"]["wal_log_hints"] == "on"
    # Everything the tested cluster runs with (the example adds production things).
    assert is_subset(harness_dcs, dcs), (harness_dcs, dcs)
    # A slot Patroni made at bootstrap would predate the publication (audit-slot.yml).
    assert "slots" not in dcs
    assert config["postgresql"]["bin_dir"] == PG_BIN
    hba = [line.split() for line in config["bootstrap"]["pg_hba"]]
    assert any(f[:3] == ["host", "cronman", "cronman"] and f[-1] == "scram-sha-256"
               for f in hba), hba
    assert any(f[:3] == ["host", "replication", config["postgresql"]["authentication"]
                         ["replication"]["username"]] for f in hba), hba
    etcd = env_file(OPS / "etcd.default")
    peers = dict(p.split("=", 1) for p in etcd["ETCD_INITIAL_CLUSTER"].split(","))
    clients = {re.sub(r"^http://|:2380$", "", url) + ":2379" for url in peers.values()}
    assert set(config["etcd3"]["hosts"].split(",")) == clients


def test_members_differ_only_in_name_and_addresses():
    def generic(path: Path) -> str:
        config = load(path)
        host = config["postgresql"]["connect_address"].rsplit(":", 1)[0]
        text = re.sub(rf"(listen|connect_address): {re.escape(host)}:", r"\1: HOST:",
                      path.read_text())
        return re.sub(rf"\b{config['name']}\b", "NAME", text)
    first, *rest = MEMBERS
    for path in rest:
        assert generic(path) == generic(first), path.name


def test_audit_slot_is_cronmans():
    slots = load(OPS / "audit-slot.yml")["slots"]
    assert slots == {DEFAULT_SLOT: {"type": "logical", "database": "cronman",
                                    "plugin": "pgoutput"}}


def test_env_url_names_every_member_and_wants_the_writer():
    url = env_file(OPS / "cronman.env")["CRONMAN_DATABASE_URL"]
    params = libpq_params(normalise_url(url))
    members = [load(p)["postgresql"]["connect_address"].rsplit(":", 1) for p in MEMBERS]
    assert params["host"].split(",") == [h for h, _ in members]
    assert params["port"].split(",") == [p for _, p in members]
    assert params["target_session_attrs"] == "read-write"
    assert params["dbname"] == "cronman" and params["user"] == "cronman"


def loopback_copy(path: Path, tmp_path: Path, etcd: int) -> Path:
    """The member file with every address it listens on or connects to on
    loopback (the validator tries them): 127.0.0.2, as connect_address must
    not be 127.0.0.1; etcd at a listener the test holds."""
    config = load(path)
    text = path.read_text()
    text = text.replace(config["etcd3"]["hosts"], f"127.0.0.1:{etcd}")
    for section in ("restapi", "postgresql"):
        address = config[section]["connect_address"]
        text = text.replace(address, f"127.0.0.2:{free_loopback_port('127.0.0.2')}")
    copy = tmp_path / path.name
    copy.write_text(text)
    copied = load(copy)
    for section in ("restapi", "postgresql"):
        for key in ("listen", "connect_address"):
            assert copied[section][key].startswith("127.0.0.2:"), (section, key)
    assert copied["etcd3"]["hosts"] == f"127.0.0.1:{etcd}"
    return copy


def free_loopback_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PATRONI, "--validate-config", str(path)], capture_output=True,
                          text=True, timeout=30)


@pytest.mark.skipif(not os.path.exists(PATRONI), reason="patroni is not installed")
def test_patroni_validates_each_member(tmp_path):
    with socket.socket() as etcd:
        etcd.bind(("127.0.0.1", 0))
        etcd.listen()
        port = etcd.getsockname()[1]
        for path in MEMBERS:
            result = validate(loopback_copy(path, tmp_path, port))
            assert result.returncode == 0, (path.name, result.stdout, result.stderr)
        # The validator does look: a wrong bin_dir is refused.
        broken = tmp_path / "broken.yml"
        broken.write_text(loopback_copy(MEMBERS[0], tmp_path, port).read_text()
                          .replace(f"bin_dir: {PG_BIN}", "bin_dir: /nonexistent"))
        result = validate(broken)
        assert result.returncode != 0 and "bin_dir" in result.stdout + result.stderr
