"""The host policy type: what counts as root, what a policy refuses, how it is read."""

from __future__ import annotations

import pytest

from cronman import host_policy
from cronman.errors import ValidationError
from cronman.host_policy import HostPolicy, asks_root


@pytest.mark.parametrize(("user", "root"), [
    (None, False), ("nobody", False), ("1000", False), ("1000:1000", False),
    ("root", True), ("0", True), ("0:1000", True), ("1000:0", True), ("00", True),
])
def test_what_runs_as_root(user, root):
    assert asks_root(user) is root


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
