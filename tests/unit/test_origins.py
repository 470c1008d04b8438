"""Origins as the cross-site check compares them, and CRONMAN_ALLOWED_ORIGINS."""

from __future__ import annotations

import pytest

from cronman.api.common import is_json_type
from cronman.api.origins import host_name, is_loopback_name
from cronman.config import Settings, origin_of


@pytest.mark.parametrize("url, origin", [
    ("https://Console.Example.org/", "https://console.example.org"),
    ("https://console.example.org:443/x?y", "https://console.example.org"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("http://[::1]:80/", "http://[::1]"),
    ("null", None), ("file:///etc/passwd", None), ("https://u:p@host/", None),
    ("https://host:99999/", None), ("", None),
])
def test_origin_of(url, origin):
    assert origin_of(url) == origin


def test_allowed_origins_setting():
    s = Settings.from_env(environ={"CRONMAN_ALLOWED_ORIGINS":
                                   " https://a.example/, http://b.example:8080 ,"})
    assert s.allowed_origin_set == {"https://a.example", "http://b.example:8080"}
    for bad in ("*", "https://a.example/console", "a.example", "ftp://a.example",
                "https://a.example?x"):
        with pytest.raises(ValueError, match="CRONMAN_ALLOWED_ORIGINS"):
            Settings(allowed_origins=bad)


def test_loopback_names():
    for host in ("localhost:8080", "LOCALHOST", "app.localhost", "127.0.0.1", "127.9.9.9:1",
                 "[::1]:8080"):
        assert is_loopback_name(host_name(host)), host
    for host in ("evil.example", "127.0.0.1.nip.io", "localhost.evil.example", "0.0.0.0",
                 "", "[::1"):
        assert not is_loopback_name(host_name(host)), host


@pytest.mark.parametrize("value, ok", [
    ("application/json", True), ("Application/JSON; charset=utf-8", True),
    ("application/merge-patch+json", True), ("text/plain", False),
    ("application/x-www-form-urlencoded", False), ("multipart/form-data", False),
    ("application/+json", False), ("text/json", False), (None, False), ("", False),
])
def test_json_types(value, ok):
    assert is_json_type(value) is ok


def test_allowed_hosts_setting():
    s = Settings.from_env(environ={"CRONMAN_ALLOWED_HOSTS": " Cronman, api.example.org. ,"})
    assert s.allowed_host_set == {"cronman", "api.example.org"}
    for bad in ("*", "*.example.org", "api.example.org:8080", "http://api.example.org",
                "api..example", "-api", "a b", "api.example.org/x"):
        with pytest.raises(ValueError, match="CRONMAN_ALLOWED_HOSTS"):
            Settings(allowed_hosts=bad)
