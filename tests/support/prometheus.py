"""A real Prometheus (Debian's ``prometheus``) for tests: its own temp dir and
loopback port, scraping the given targets every second and evaluating the
given rule files every second; stopped by PID.

    with PrometheusServer(tmp_path, {"cronman-standalone": ["127.0.0.1:8080"]},
                          rule_files=[RULES]) as prom:
        prom.query("cronman:fires:rate1m")
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import free_port
from tests.support.waiting import wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class PrometheusServer:
    def __init__(self, base: Path, targets: Mapping[str, Sequence[str]], *,
                 rule_files: Sequence[Path] = ()) -> None:
        self.dir = Path(base) / "prometheus"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = []
        for path in rule_files:
            copy = self.dir / Path(path).name
            shutil.copy(path, copy)
            rules.append(str(copy))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "1s"},
            "rule_files": rules,
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(addrs)}]}
                               for job, addrs in targets.items()],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log_path = self.dir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_for(self._ready, 30, "Prometheus ready", alive=self._alive)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def _alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n"
                                 f"{self.log_path.read_text(errors='replace')[-3000:]}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[str, float]:
        """An instant query: {the series' labels but its name, as text: its value}."""
        out = {}
        for sample in self.api("query", query=expr)["result"]:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample["metric"].items())
                              if k != "__name__")
            out[labels] = float(sample["value"][1])
        return out

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def wait(self, check: Any, timeout: float, what: str) -> Any:
        return wait_for(check, timeout, what, interval=0.5, alive=self._alive)
