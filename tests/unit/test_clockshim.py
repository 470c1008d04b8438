"""The clock shim (tests/support/clockshim): a child process's wall clock
jumps by the offset the moment the file changes; its monotonic clock, its
sleeps and asyncio do not notice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.support import clockshim

REASON = clockshim.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

# Answers one line of readings for each line it is sent: its wall clock by
# every path the shim intercepts, its monotonic clock, how long a 0.2 s
# time.sleep and a 0.2 s asyncio.sleep took on the monotonic clock.
CHILD = r"""
import asyncio, ctypes, datetime, json, sys, time

libc = ctypes.CDLL(None, use_errno=True)

class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]

libc.time.restype = ctypes.c_long
libc.time.argtypes = [ctypes.c_void_p]

def gettimeofday():
    tv = Timeval()
    if libc.gettimeofday(ctypes.byref(tv), None) != 0:
        raise OSError(ctypes.get_errno(), "gettimeofday")
    return tv.sec + tv.usec / 1e6

def slept(nap):
    t0 = time.monotonic()
    nap()
    return time.monotonic() - t0

for line in sys.stdin:
    out = {
        "time": time.time(),
        "realtime": time.clock_gettime(time.CLOCK_REALTIME),
        "coarse": time.clock_gettime(5),  # CLOCK_REALTIME_COARSE (Linux)
        "tai": time.clock_gettime(time.CLOCK_TAI),
        "datetime": datetime.datetime.now(datetime.timezone.utc).timestamp(),
        "gettimeofday": gettimeofday(),
        "libc_time": libc.time(None),
        "monotonic": time.monotonic(),
        "boottime": time.clock_gettime(time.CLOCK_BOOTTIME),
    }
    if line.strip() == "sleep":
        out["sleep"] = slept(lambda: time.sleep(0.2))
        out["asyncio"] = slept(lambda: asyncio.run(asyncio.sleep(0.2)))
    print(json.dumps(out), flush=True)
"""

WALL = ("time", "realtime", "datetime", "gettimeofday", "coarse", "libc_time")
# Which of our clocks each of the child's readings is compared with, and how
# far behind it may read: the coarse clock a tick, time() whole seconds.
OURS = {**dict.fromkeys(WALL, "time"), "tai": "tai", "monotonic": "monotonic",
        "boottime": "boottime"}
BEHIND = {"coarse": 0.05, "libc_time": 1.0}


def _ours() -> dict[str, float]:
    return {"time": time.time(), "monotonic": time.monotonic(),
            "tai": time.clock_gettime(time.CLOCK_TAI),
            "boottime": time.clock_gettime(time.CLOCK_BOOTTIME)}


class Child:
    def __init__(self, clock: clockshim.Clock) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD],
                                     env={**os.environ, **clock.env()},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, what: str = "read"
            ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """The child's readings, and ours before we asked and after it answered."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        before = _ours()
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return answer, before, _ours()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def _assert_off(child: Child, by: float, what: str = "read") -> dict[str, float]:
    """Each of the child's wall clocks reads ours plus ``by`` (its monotonic
    and boot clocks ours) at some moment between our readings around it."""
    theirs, before, after = child.ask(what)
    for k, ours in OURS.items():
        shift = by if k in WALL or k == "tai" else 0.0
        lo = before[ours] + shift - BEHIND.get(k, 0.0) - 0.001
        hi = after[ours] + shift + 0.001
        assert lo <= theirs[k] <= hi, (k, theirs[k] - before[ours], by, after[ours] - before[ours])
    return theirs


def test_the_wall_clock_jumps_at_once_and_the_monotonic_clock_does_not(tmp_path):
    with clockshim.Clock(tmp_path / "offset") as clock:
        child = Child(clock)
        try:
            _assert_off(child, 0.0)
            for by in (30.0, -12.25, 3600.0, -0.75, 0.0):
                clock.set(by)
                assert clock.offset_s == by
                _assert_off(child, by)
        finally:
            child.close()


def test_sleeps_and_asyncio_keep_their_pace_across_a_jump(tmp_path):
    with clockshim.Clock(tmp_path / "offset") as clock:
        child = Child(clock)
        try:
            for by in (0.0, 25.0, -25.0):
                clock.set(by)
                theirs = _assert_off(child, by, "sleep")
                assert 0.19 < theirs["sleep"] < 5.0, theirs
                assert 0.19 < theirs["asyncio"] < 5.0, theirs
        finally:
            child.close()


def test_without_an_offset_file_every_call_passes_through(tmp_path):
    env = clockshim.env(tmp_path / "missing")
    code = "import time, json; print(json.dumps([time.time(), time.monotonic()]))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True, timeout=30)
    wall, mono = json.loads(out.stdout)
    assert abs(wall - time.time()) < 5
    assert abs(mono - time.monotonic()) < 5


# Threads read the wall clock against the monotonic one while the offset
# flips: every reading must show one offset or the other, whole.
THREADS_CHILD = r"""
import json, sys, threading, time
base = float(sys.argv[1])  # the real wall clock minus the monotonic one, ours
seen = set()
def read():
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        if after - before < 0.01:  # not preempted between the readings
            seen.add(round(wall - (before + after) / 2 - base, 2))
threads = [threading.Thread(target=read) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(sorted(seen)))
"""


def test_threads_see_each_offset_whole_while_it_flips(tmp_path):
    with clockshim.Clock(tmp_path / "offset") as clock:
        base = time.time() - time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", THREADS_CHILD, repr(base)],
                                env={**os.environ, **clock.env()}, stdout=subprocess.PIPE,
                                text=True)
        big = 987_654_321.5  # every byte of the offset changes with each flip
        while proc.poll() is None:
            clock.set(big)
            time.sleep(0.0005)
            clock.set(0.0)
            time.sleep(0.0005)
        out, _ = proc.communicate(timeout=10)
    seen = json.loads(out)
    assert all(abs(x) < 0.05 or abs(x - big) < 0.05 for x in seen), seen
    assert any(abs(x) < 1 for x in seen) and any(abs(x - big) < 1 for x in seen), seen
