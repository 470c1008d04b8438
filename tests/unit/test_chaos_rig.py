"""The chaos rig's database URLs: the partition node's URL names its own
proxy for each server the run's URL names (one, or each Patroni member)."""

from __future__ import annotations

from cronman.store.connect import libpq_params, normalise_url
from tests.chaos.run import db_endpoints, with_db_endpoints

ONE = "postgresql+psycopg2://postgres@127.0.0.1:5432/cronman_chaos_x"
MEMBERS = ("postgresql+psycopg2://postgres@/cronman_chaos?host=127.0.0.1:5001"
           "&host=127.0.0.1:5002&host=127.0.0.1:5003&target_session_attrs=read-write")


def test_one_server_or_each_member_in_order():
    assert db_endpoints(ONE) == [("127.0.0.1", 5432)]
    assert db_endpoints(MEMBERS) == [("127.0.0.1", 5001), ("127.0.0.1", 5002),
                                     ("127.0.0.1", 5003)]


def test_the_partition_nodes_url_names_its_proxies_and_keeps_the_options():
    one = with_db_endpoints(ONE, [("10.239.0.1", 40001)])
    assert one == "postgresql+psycopg2://postgres@10.239.0.1:40001/cronman_chaos_x"
    proxies = [("10.239.0.1", 40001), ("10.239.0.1", 40002), ("10.239.0.1", 40003)]
    moved = with_db_endpoints(MEMBERS, proxies)
    assert db_endpoints(moved) == proxies
    params = libpq_params(normalise_url(moved))
    assert params["host"] == "10.239.0.1,10.239.0.1,10.239.0.1"
    assert params["port"] == "40001,40002,40003"
    assert params["target_session_attrs"] == "read-write"
    assert params["dbname"] == "cronman_chaos"
