"""A private containerd for tests, and the tiny image they run.

``ContainerdServer`` starts ``containerd`` with its own config, root and
state dirs and gRPC socket under a temp dir (the CRI plugin disabled) and
stops it by PID; ``restart()`` kills and starts it again on the same dirs,
so running containers (their shims) survive as with a real restart.

``build_busybox_image(path, ref)`` writes an OCI image layout archive (one
gzip layer holding Debian's static busybox and its applet links, a config, a
manifest, ``index.json`` naming ``ref``, ``oci-layout``): what ``cronman
agent images import`` takes. The benchmark uses both as well.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
BUSYBOX = "/bin/busybox"
TEST_IMAGE = "cronman.test/busybox:1"


def containerd_available() -> str | None:
    """Why a private containerd cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "containerd needs root"
    for path in (CONTAINERD, RUNC, BUSYBOX):
        if not os.path.exists(path):
            return f"{path} is missing (ops/setup --dev installs it)"
    return None


CONFIG = """version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  level = "warn"
"""


class ContainerdServer:
    """One private containerd child process."""

    def __init__(self, workdir: Path | None = None) -> None:
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="cronman-ctrd-"))
        self.socket = str(self.dir / "containerd.sock")
        self.config = self.dir / "config.toml"
        self.config.write_text(CONFIG.format(root=self.dir / "root", state=self.dir / "state",
                                             socket=self.socket))
        self.log_path = self.dir / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen([CONTAINERD, "--config", str(self.config)], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.log_path.read_text()[-2000:]}")
            if _socket_answers(self.socket):
                return
            time.sleep(0.05)
        raise TimeoutError(f"containerd did not open {self.socket}")

    def kill(self) -> None:
        """SIGKILL containerd (its shims, and so the containers, keep running)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
        with _suppress_missing():
            os.unlink(self.socket)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        """Stop containerd and every shim it started, then remove its dirs."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None
        self._kill_shims()
        self._unmount_all()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_shims(self) -> None:
        """Shims (and their containers) started by this containerd: they
        name our socket on their command line."""
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"containerd-shim" in cmdline[0] and self.socket.encode() in b" ".join(cmdline):
                with _suppress_missing():
                    os.killpg(int(pid_dir.name), signal.SIGKILL)
                with _suppress_missing():
                    os.kill(int(pid_dir.name), signal.SIGKILL)

    def _unmount_all(self) -> None:
        mounts = []
        with open("/proc/self/mounts") as f:
            for line in f:
                target = line.split()[1]
                if target.startswith(str(self.dir)):
                    mounts.append(target)
        for target in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], check=False, capture_output=True)


@contextmanager
def _suppress_missing() -> Iterator[None]:
    try:
        yield
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass


def _socket_answers(path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(0.2)
            s.connect(path)
            return True
    except OSError:
        return False


# -- the test image -------------------------------------------------------------

APPLETS = ("sh", "echo", "cat", "sleep", "env", "id", "true", "false", "head", "dd", "yes",
           "printf", "ls", "kill", "trap", "seq")


def busybox_layer() -> bytes:
    """A gzip tar of /bin/busybox and its applet links (plus /tmp)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, mode in (("bin", 0o755), ("tmp", 0o1777), ("etc", 0o755)):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)
        data = Path(BUSYBOX).read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(passwd))
    return raw.getvalue()


def build_busybox_image(path: Path, ref: str = TEST_IMAGE) -> Path:
    """Write an OCI image layout archive of busybox to ``path``; returns it."""
    tar_bytes = busybox_layer()
    layer = gzip.compress(tar_bytes, mtime=0)
    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(layer)}],
    }).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       **blob(manifest),
                       "annotations": {"org.opencontainers.image.ref.name": ref}}],
    }).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", index)] + [
                (f"blobs/sha256/{d.split(':', 1)[1]}", b) for d, b in blobs.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
