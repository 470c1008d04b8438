"""The OCI runtime spec of a container (pure: no I/O).

Close to containerd's own defaults (``oci.populateDefaultUnixSpec``): the
default capability set, no new privileges, proc/dev/sys mounts, masked and
read-only kernel paths. On top: the target's command, env and user, a CFS
quota for ``cpu``, a hard memory limit for ``memory_mb`` (the same as the
memory+swap limit where the kernel accounts swap, so no swapping past it), a
pids limit, a cgroup path of our own (so that the agent can read the OOM
count), and a network namespace of its own (loopback only) unless the
target asks for the host's network.
"""

from __future__ import annotations

from typing import Any

from cronman.worker_agent.runtime import ContainerSpec, parse_user

CPU_PERIOD_US = 100_000
PIDS_LIMIT = 4096
NOFILE_LIMIT = 1024

DEFAULT_CAPABILITIES = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]
MASKED_PATHS = [
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
    "/proc/scsi",
]
READONLY_PATHS = [
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
]


def cgroup_path(namespace: str, container_id: str) -> str:
    return f"/cronman/{namespace}/{container_id}"


def build_spec(spec: ContainerSpec, image_config: dict[str, Any], *, namespace: str,
               hostname: str = "cronman") -> dict[str, Any]:
    """The runtime spec (``config.json``) for ``spec`` on an image whose
    config (the ``config`` object of the image config blob) is ``image_config``."""
    args = list(spec.command) or (list(image_config.get("Entrypoint") or [])
                                  + list(image_config.get("Cmd") or []))
    if not args:
        raise ValueError("no command: the target names none and the image has none")
    env = _merge_env(list(image_config.get("Env") or []), spec.env)
    uid, gid = parse_user(spec.user)
    caps = list(DEFAULT_CAPABILITIES)
    namespaces = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    if spec.network != "host":
        namespaces.append({"type": "network"})
    memory = spec.memory_mb * 1024 * 1024
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid},
            "args": args,
            "env": env,
            "cwd": image_config.get("WorkingDir") or "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": NOFILE_LIMIT, "soft": NOFILE_LIMIT}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs"},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620",
                         "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        ],
        "linux": {
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "memory": {"limit": memory},
                "cpu": {"quota": max(1000, int(spec.cpu * CPU_PERIOD_US)),
                        "period": CPU_PERIOD_US},
                "pids": {"limit": PIDS_LIMIT},
            },
            "cgroupsPath": cgroup_path(namespace, spec.name),
            "namespaces": namespaces,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
        },
    }


def _merge_env(image_env: list[str], env: dict[str, str]) -> list[str]:
    merged: dict[str, str] = {}
    for item in image_env:
        name, _, value = item.partition("=")
        merged[name] = value
    merged.update(env)
    merged.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return [f"{k}={v}" for k, v in merged.items()]
