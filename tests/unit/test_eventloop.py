"""The node's event loop choice: uvloop when installed, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from cronman import eventloop
from cronman.config import Settings


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_auto_runs_on_uvloop_when_installed():
    assert eventloop.run(_loop_type()) is uvloop.Loop
    assert eventloop.run(_loop_type(), "uvloop") is uvloop.Loop


def test_asyncio_runs_on_the_default_loop():
    loop_type = eventloop.run(_loop_type(), "asyncio")
    assert not issubclass(loop_type, uvloop.Loop)
    assert issubclass(loop_type, asyncio.BaseEventLoop)


def test_run_returns_the_result_and_closes_its_loop():
    async def go() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    loop = eventloop.run(go())
    assert loop.is_closed()


def test_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="auto, uvloop, asyncio"):
        eventloop.loop_factory("tokio")


def test_setting_from_the_environment():
    assert Settings.from_env(environ={}).event_loop == "auto"
    assert Settings.from_env(environ={"CRONMAN_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"
    with pytest.raises(ValueError, match="CRONMAN_EVENT_LOOP"):
        Settings.from_env(environ={"CRONMAN_EVENT_LOOP": "fast"})


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_a_loop_binding_tells_whether_its_loop_is_the_running_one(choice) -> None:
    async def bind() -> eventloop.LoopBinding:
        binding = eventloop.LoopBinding()
        assert binding.here()
        assert binding.loop is asyncio.get_running_loop()
        return binding

    first = eventloop.run(bind(), choice)
    assert not first.here()  # its loop has stopped (and closed)

    async def elsewhere() -> tuple[bool, bool]:
        # Another loop, another thread: neither is this binding's.
        other_thread = await asyncio.to_thread(first.here)
        return first.here(), other_thread

    assert eventloop.run(elsewhere(), choice) == (False, False)

    async def from_another_thread() -> bool:
        binding = eventloop.LoopBinding()
        return await asyncio.to_thread(binding.here)

    assert eventloop.run(from_another_thread(), choice) is False


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_a_per_loop_object_is_made_once_per_running_loop(choice) -> None:
    held: eventloop.PerLoop[object] = eventloop.PerLoop()
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    async def twice() -> tuple[object, object]:
        return held.get(make), held.get(make)

    a, b = eventloop.run(twice(), choice)
    assert a is b and made == [a]
    c, _ = eventloop.run(twice(), choice)  # another loop: made again
    assert c is not a and made == [a, c]
    assert held.take() == (c, False)  # its loop is gone: not to be closed from here
    assert held.take() == (None, False)

    async def take_here() -> tuple[object | None, bool]:
        held.get(make)
        return held.take()

    d, here = eventloop.run(take_here(), choice)
    assert d is made[-1] and here
