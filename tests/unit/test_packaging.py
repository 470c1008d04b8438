"""The light package's dependency ranges and the pinned sets agree."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (REPO / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{name}: {line} is not pinned"
            out[req.name.lower()] = spec.version
    return out


def test_every_light_dependency_is_pinned_within_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    ranges = {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}
    pinned = pins("requirements-client.txt")
    assert set(ranges) == set(pinned)
    for name, version in pinned.items():
        assert ranges[name].specifier.contains(version), (name, version)


def test_the_light_and_server_sets_do_not_overlap_and_make_requirements_txt():
    light, server = pins("requirements-client.txt"), pins("requirements-server.txt")
    assert not set(light) & set(server)
    includes = [line.split()[1] for line in (REPO / "requirements.txt").read_text().splitlines()
                if line.startswith("-r ")]
    assert includes == ["requirements-client.txt", "requirements-server.txt"]


def test_the_server_check_asks_for_what_the_server_extra_installs(monkeypatch):
    """`cronman standalone` refuses to start only for want of a distribution the
    server extra installs (it once asked for aiohttp, which only the dev set has)."""
    import importlib.metadata

    from cronman.cli import group

    server = {name.lower() for name in pins("requirements-server.txt")}
    assert {name.lower() for name in group.server_requirements()} == server
    assert group.missing_server_packages() == []  # this venv has requirements.txt

    def not_installed(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    # A source tree that was never installed reads requirements-server.txt.
    monkeypatch.setattr(importlib.metadata, "requires", not_installed)
    assert {name.lower() for name in group.server_requirements()} == server
