"""What the HTTP client writes: request line, Host, framing, and refusal of smuggling."""

from __future__ import annotations

import pytest

from cronman.callbacks.httpclient import InvalidRequest, InvalidURL, Origin, PreparedRequest


def lines(request: PreparedRequest, headers=()) -> list[bytes]:
    head, _, _ = request.render(headers).partition(b"\r\n\r\n")
    return head.split(b"\r\n")


def test_post_with_body_and_per_call_headers():
    request = PreparedRequest("post", "http://example.com/hook?a=1", body=b"{}",
                              headers={"Content-Type": "application/json"},
                              default_headers={"User-Agent": "cronman/0.1", "Accept": "*/*"})
    data = request.render([("Cronman-Attempt", "2")])
    assert data.endswith(b"\r\n\r\n{}")
    assert lines(request, [("Cronman-Attempt", "2")]) == [
        b"POST /hook?a=1 HTTP/1.1",
        b"Host: example.com",
        b"User-Agent: cronman/0.1",
        b"Accept: */*",
        b"Content-Type: application/json",
        b"Content-Length: 2",
        b"Cronman-Attempt: 2",
    ]
    assert request.origin == Origin("http", "example.com", 80)


def test_framing_of_requests_without_a_body():
    assert b"Content-Length: 0" in lines(PreparedRequest("DELETE", "http://h/x"))
    assert not any(b"Content-Length" in x for x in lines(PreparedRequest("GET", "http://h/x")))


def test_a_body_without_content_type_is_octet_stream():
    assert b"Content-Type: application/octet-stream" in lines(
        PreparedRequest("PUT", "http://h/", body=b"x"))


def test_the_callers_header_replaces_a_default_one():
    request = PreparedRequest("GET", "http://h/", headers={"user-agent": "mine"},
                              default_headers={"User-Agent": "cronman/0.1"})
    assert [x for x in lines(request) if x.lower().startswith(b"user-agent")] == [
        b"user-agent: mine"]


@pytest.mark.parametrize(
    ("url", "origin", "host", "target"),
    [
        ("https://example.com", Origin("https", "example.com", 443), b"example.com", b"/"),
        ("http://example.com:8080/a", Origin("http", "example.com", 8080), b"example.com:8080",
         b"/a"),
        ("https://[::1]:8443/x", Origin("https", "::1", 8443), b"[::1]:8443", b"/x"),
        ("http://[2001:db8::1]/", Origin("http", "2001:db8::1", 80), b"[2001:db8::1]", b"/"),
        ("http://b\u00fccher.example/\u00fc?q=\u20ac&x=%20",
         Origin("http", "xn--bcher-kva.example", 80), b"xn--bcher-kva.example",
         b"/%C3%BC?q=%E2%82%AC&x=%20"),
        ("HTTP://Example.COM/#frag", Origin("http", "example.com", 80), b"example.com", b"/"),
    ],
)
def test_origin_host_header_and_request_target(url, origin, host, target):
    request = PreparedRequest("GET", url)
    assert request.origin == origin
    head = lines(request)
    assert head[0] == b"GET " + target + b" HTTP/1.1"
    assert head[1] == b"Host: " + host


@pytest.mark.parametrize("url", ["ftp://h/", "http:///nohost", "http://h:99999/", "/relative"])
def test_urls_that_cannot_be_requested(url):
    with pytest.raises(InvalidURL):
        PreparedRequest("GET", url)


@pytest.mark.parametrize(
    ("name", "value"),
    [("X-A", "v\r\nInjected: 1"), ("X-A", "v\nx"), ("X-A", "v\0"), ("Bad Name", "v"),
     ("X:A", "v"), ("", "v")],
)
def test_header_smuggling_is_refused(name, value):
    with pytest.raises(InvalidRequest):
        PreparedRequest("GET", "http://h/", headers={name: value})
    with pytest.raises(InvalidRequest):
        PreparedRequest("GET", "http://h/").render([(name, value)])


def test_an_invalid_method_is_refused():
    with pytest.raises(InvalidRequest):
        PreparedRequest("GE T", "http://h/")
