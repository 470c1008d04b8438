"""The host policy type: what counts as root, what a policy refuses, how it is read."""

from __future__ import annotations

import pytest

from cronman import host_policy
from cronman.errors import ValidationError
from cronman.host_policy import HostPolicy, asks_root, parse_user
from cronman.worker_agent.runtime import RuntimeError_
from cronman.worker_agent.runtime import parse_user as runtime_parse_user

# Every spelling the runtimes' parser reads as uid or gid 0.
ROOT_SPELLINGS = ("root", "0", "0:1000", "1000:0", "00", "+0", "-0", "0_0", "65534:+0",
                  " 0 ", "65534:-0", "0:0")


@pytest.mark.parametrize(("user", "root"), [
    (None, False), ("nobody", False), ("1000", False), ("1000:1000", False), ("65534:+1", False),
    *((spelling, True) for spelling in ROOT_SPELLINGS),
])
def test_what_runs_as_root_is_what_the_runtime_runs_as(user, root):
    assert asks_root(user) is root
    assert (0 in runtime_parse_user(user)) is root


@pytest.mark.parametrize("user", ["alice", "0:x", "", ":0", "1:-1", "-1", "0:0:0"])
def test_a_user_the_runtime_cannot_read_is_refused_whatever_the_policy(user):
    with pytest.raises(RuntimeError_):
        runtime_parse_user(user)
    with pytest.raises(ValueError):
        parse_user(user)
    assert [f for f, _ in host_policy.UNRESTRICTED.refusals({"user": user})] == ["user"]


def test_a_grant_keeps_only_its_keys_and_reads_over_the_live_default():
    assert host_policy.grant_keys({"root": True}) == {"root": True}
    assert host_policy.grant_keys({"networks": ["host", "none"]}) == {
        "networks": ["host", "none"]}
    with pytest.raises(ValidationError):
        host_policy.grant_keys({"root": True, "mounts": []})
    lax = HostPolicy(networks=frozenset({"none", "host"}))
    assert host_policy.over(None, lax) is lax
    assert host_policy.over({"root": True}, lax) == HostPolicy(root=True, networks=lax.networks)
    # The default narrowed later: the keys the grant leaves out follow it.
    assert host_policy.over({"root": True}, HostPolicy()) == HostPolicy(root=True)
    # A grant may be narrower than the default.
    assert host_policy.over({"networks": ["none"]}, lax) == HostPolicy()


def test_the_default_refuses_root_and_the_host_network_naming_the_field():
    default = HostPolicy()
    assert default.refusals({"user": None, "network": "none"}) == []
    assert [f for f, _ in default.refusals({"user": "root", "network": "host"})] == [
        "user", "network"]
    granted = HostPolicy(root=True, networks=frozenset({"none", "host"}))
    assert granted.refusals({"user": "root", "network": "host"}) == []


def test_read_from_json_keys_left_out_keep_the_base():
    base = HostPolicy(process=True)
    assert host_policy.from_dict({"root": True}, base=base) == HostPolicy(root=True,
                                                                          process=True)
    for bad, field in (({"root": 1}, "root"), ({"networks": "host"}, "networks"),
                       ({"networks": ["none", "none"]}, "networks[1]"),
                       ({"privileged": True}, "privileged")):
        with pytest.raises(ValidationError) as err:
            host_policy.from_dict(bad)
        assert err.value.field == field
    assert host_policy.parse("", name="X") == host_policy.DEFAULT
    with pytest.raises(ValueError, match="^X: "):
        host_policy.parse("{", name="X")
