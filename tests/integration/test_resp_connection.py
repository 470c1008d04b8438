"""The lean asyncio Redis connection (``coordination.resp``) against real
servers: pipelined replies go to their own calls, a flushed or restarted
server gets its scripts again, and a server that stops answering, goes away
or was never there fails the calls with redis-py's errors, within the socket
timeout, and is connected to again afterwards."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis
import uvloop
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cronman.coordination.redis_scripts import script_source
from cronman.coordination.resp import RespConnection, RespScript, resp_settings
from tests.support.redis_servers import redis_servers

pytestmark = pytest.mark.redis

ECHO = "return {KEYS[1], ARGV[1]}"

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request) -> Run:
    """Run a coroutine on the node's loop (uvloop) and on asyncio's own."""
    return uvloop.run if request.param == "uvloop" else asyncio.run


def connection(url: str, socket_timeout: float = 1.0) -> RespConnection:
    settings = resp_settings(url, connect_timeout=0.5, socket_timeout=socket_timeout)
    assert settings is not None, url
    return RespConnection(settings)


def test_pipelined_calls_get_their_own_replies_in_the_urls_db(redis_url, run) -> None:
    async def main() -> list[list[str]]:
        conn = connection(redis_url)
        echo = RespScript(conn, ECHO)
        setter = RespScript(conn, "return redis.call('SET', KEYS[1], ARGV[1])")
        await setter(keys=["resp-test:db"], args=["here"])
        replies = await asyncio.gather(*(echo(keys=[f"k{i}"], args=[i]) for i in range(500)))
        await conn.aclose()
        return replies

    replies = run(main())
    assert replies == [[f"k{i}", str(i)] for i in range(500)]
    with redis.Redis.from_url(redis_url, decode_responses=True) as c:
        assert c.get("resp-test:db") == "here"  # in the URL's db, not db 0
        c.delete("resp-test:db")


def test_the_start_script_answers_as_through_redis_py(redis_url, run) -> None:
    source = script_source("start.lua")
    key = "resp-test:lock:job:1000"

    async def main() -> tuple[list[int], list[int]]:
        conn = connection(redis_url)
        start = RespScript(conn, source)
        first = await start(keys=[key], args=["n1/a", 5000])
        again = await start(keys=[key], args=["n2/b", 5000])
        await conn.aclose()
        return first, again

    first, again = run(main())
    # A lock that is gone: marked started by the caller, who is told so (2) and
    # lets its run row decide (start_marks), as through redis-py.
    assert first == [2]
    assert again == [0]  # started by another holder: not the caller's to send
    with redis.Redis.from_url(redis_url, decode_responses=True) as c:
        assert c.get(key) == "!n1/a"
        c.delete(key)


def test_a_flushed_script_cache_is_loaded_again(redis_url, run) -> None:
    async def main() -> tuple[list[str], list[str]]:
        conn = connection(redis_url)
        echo = RespScript(conn, ECHO)
        before = await echo(keys=["a"], args=["1"])
        with redis.Redis.from_url(redis_url) as c:
            c.script_flush()
        after = await echo(keys=["b"], args=["2"])
        await conn.aclose()
        return before, after

    assert run(main()) == (["a", "1"], ["b", "2"])


def test_a_script_error_is_a_response_error_and_the_connection_goes_on(redis_url, run) -> None:
    async def main() -> list[str]:
        conn = connection(redis_url)
        with pytest.raises(ResponseError):
            await RespScript(conn, "return redis.error_reply('nope')")(keys=[], args=[])
        ok = await RespScript(conn, ECHO)(keys=["c"], args=["3"])
        await conn.aclose()
        return ok

    assert run(main()) == ["c", "3"]


def test_a_restarted_server_is_connected_to_again(run) -> None:
    with redis_servers(1) as (server,):
        async def main() -> list[str]:
            conn = connection(server.url)
            echo = RespScript(conn, ECHO)
            await echo(keys=["a"], args=["1"])
            server.kill()
            await asyncio.sleep(0.1)  # the socket's close reaches the loop
            with pytest.raises(RedisConnectionError):
                await echo(keys=["a"], args=["2"])  # refused: nothing listens
            server.start()
            ok = await echo(keys=["a"], args=["3"])  # new server, new script cache
            await conn.aclose()
            return ok

        assert run(main()) == ["a", "3"]


@pytest.fixture
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A TCP server on loopback that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    stop.set()
    thread.join()
    for s in accepted:
        s.close()
    listener.close()


def test_a_server_that_does_not_answer_times_out_every_waiting_call(silent_server, run) -> None:
    port, accepted = silent_server

    async def main() -> tuple[list[BaseException | list[str]], float]:
        conn = connection(f"redis://127.0.0.1:{port}/0", socket_timeout=0.3)
        echo = RespScript(conn, ECHO)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await asyncio.gather(*(echo(keys=["a"], args=[i]) for i in range(3)),
                                   return_exceptions=True)
        took = loop.time() - t0
        await conn.aclose()
        return out, took

    out, took = run(main())
    assert all(isinstance(e, RedisTimeoutError) for e in out), out
    assert 0.25 <= took < 1.0
    assert len(accepted) == 1  # the three calls shared one connection


def test_a_server_that_closes_the_connection_fails_its_calls(silent_server, run) -> None:
    port, accepted = silent_server

    async def main() -> BaseException | None:
        conn = connection(f"redis://127.0.0.1:{port}/0", socket_timeout=5.0)
        call = asyncio.ensure_future(RespScript(conn, ECHO)(keys=["a"], args=["1"]))
        while not accepted:
            await asyncio.sleep(0.01)
        accepted[0].close()
        try:
            await asyncio.wait_for(call, 2.0)
        except RedisConnectionError as e:
            return e
        finally:
            await conn.aclose()
        return None

    assert isinstance(run(main()), RedisConnectionError)


def test_nothing_listening_is_a_connection_error(run) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there

    async def main() -> None:
        conn = connection(f"redis://127.0.0.1:{port}/0")
        await RespScript(conn, ECHO)(keys=["a"], args=["1"])

    with pytest.raises(RedisConnectionError):
        run(main())


def test_only_plain_tcp_urls_get_the_lean_connection() -> None:
    assert resp_settings("redis://u:p@127.0.0.1:7000/3?socket_timeout=2",
                         connect_timeout=0.5, socket_timeout=1.0) is not None
    for url in ("rediss://127.0.0.1/0", "unix:///tmp/redis.sock",
                "redis://127.0.0.1/0?health_check_interval=5"):
        assert resp_settings(url, connect_timeout=0.5, socket_timeout=1.0) is None


def test_a_caller_cancelled_while_connecting_cancels_no_other_caller(redis_url, run) -> None:
    async def main() -> list[str]:
        conn = connection(redis_url)
        echo = RespScript(conn, ECHO)
        first = asyncio.ensure_future(echo(keys=["a"], args=["1"]))
        second = asyncio.ensure_future(echo(keys=["b"], args=["2"]))
        await asyncio.sleep(0)  # both wait on the one connect now
        first.cancel()
        try:
            return await second
        finally:
            await conn.aclose()

    assert run(main()) == ["b", "2"]


def test_calls_after_close_fail_and_a_connect_in_progress_is_closed(redis_url, run) -> None:
    async def main() -> None:
        conn = connection(redis_url)
        echo = RespScript(conn, ECHO)
        pending = asyncio.ensure_future(echo(keys=["a"], args=["1"]))
        await asyncio.sleep(0)  # connecting
        await conn.aclose()
        with pytest.raises(RedisConnectionError):
            await pending  # its connection was closed as it opened
        with pytest.raises(RedisConnectionError):
            await echo(keys=["a"], args=["2"])

    run(main())
