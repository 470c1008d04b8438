"""``cronman agent images import`` and the agent command's refusals."""

from __future__ import annotations

import subprocess
import sys
import uuid

from tests.support.containerd import TEST_IMAGE
from tests.support.processes import clean_env

CRONMAN = [sys.executable, "-c", "from cronman.cli import main; main()"]


def test_images_import_into_the_agents_namespace(containerd, image_archive):
    ns = f"cli{uuid.uuid4().hex[:8]}"
    env = clean_env({"CRONMAN_CONTAINERD_ADDRESS": containerd.socket,
                     "CRONMAN_CONTAINERD_NAMESPACE": ns})
    res = subprocess.run(CRONMAN + ["agent", "images", "import", str(image_archive)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [TEST_IMAGE] and f"namespace {ns!r}" in res.stderr
    res = subprocess.run(CRONMAN + ["agent", "--containerd-address", "/nonexistent.sock",
                                    "images", "import", str(image_archive)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and "containerd unreachable" in res.stderr


def test_agent_needs_redis():
    res = subprocess.run(CRONMAN + ["agent", "--runtime", "process"], env=clean_env(),
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "CRONMAN_REDIS_URL is not set" in res.stderr
