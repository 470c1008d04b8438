"""Job definitions read from files: JSON or YAML, one job or many, a file or a folder.

A file (or ``-``, standard input) holds one job object, a list of them, or
``{"jobs": [...]}``; a YAML file may hold several documents (``---``), each
of those forms. A folder contributes its ``*.yaml``, ``*.yml`` and
``*.json`` files in name order (with ``recursive``, those of its
sub-folders too). Each job keeps where it came from, for messages.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUFFIXES = (".yaml", ".yml", ".json")

# libyaml's parser when PyYAML was built with it (its wheels are): ~10x faster.
_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(Exception):
    """A file that cannot be read or is not a job definition (the message names it)."""


@dataclass(frozen=True)
class Definition:
    """One job definition and where it came from (``jobs/a.yaml``, ``jobs/a.yaml#3``)."""

    source: str
    spec: dict[str, Any]


def load_definitions(paths: Iterable[str], *, recursive: bool = False) -> list[Definition]:
    """Every job definition in ``paths`` (files, folders, ``-``), in order."""
    out: list[Definition] = []
    for path in paths:
        for file in _files(path, recursive):
            out += _definitions(file, _read(file))
    return out


def _files(path: str, recursive: bool) -> Iterator[str]:
    if path == "-":
        yield path
        return
    p = Path(path)
    if p.is_dir():
        pattern = "**/*" if recursive else "*"
        found = sorted(f for f in p.glob(pattern) if f.is_file() and f.suffix in SUFFIXES)
        if not found:
            raise DocumentError(f"{path}: no *.yaml, *.yml or *.json files in this folder")
        for f in found:
            yield str(f)
    elif p.exists():
        yield path
    else:
        raise DocumentError(f"{path}: no such file or folder")


def _read(file: str) -> list[Any]:
    """The documents of one file (a JSON file is one document)."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{file}: {exc}") from None
    if file.endswith(".json") or (file == "-" and text.lstrip()[:1] in ("{", "[")):
        try:
            return [json.loads(text)]
        except ValueError as exc:
            raise DocumentError(f"{file}: not valid JSON: {exc}") from None
    try:
        return list(yaml.load_all(text, Loader=_YamlLoader))
    except yaml.YAMLError as exc:
        raise DocumentError(f"{file}: not valid YAML: {exc}") from None


def _definitions(file: str, documents: list[Any]) -> list[Definition]:
    specs: list[Any] = []
    for doc in documents:
        if doc is None:
            continue
        if isinstance(doc, dict) and set(doc) == {"jobs"}:
            doc = doc["jobs"]
        if isinstance(doc, list):
            specs += doc
        else:
            specs.append(doc)
    out = []
    for i, spec in enumerate(specs):
        source = file if len(specs) == 1 else f"{file}#{i + 1}"
        if not isinstance(spec, dict):
            raise DocumentError(f"{source}: a job must be an object, not {type(spec).__name__}")
        out.append(Definition(source, _json_safe(spec, source)))
    return out


def _json_safe(value: Any, source: str) -> Any:
    """YAML may give dates and non-string keys: turn them into what JSON holds."""
    if isinstance(value, dict):
        return {_key(k, source): _json_safe(v, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v, source) for v in value]
    if hasattr(value, "isoformat"):  # a YAML timestamp (2026-11-13T04:13:22Z) or date
        text: str = value.isoformat()
        return text.replace("+00:00", "Z")
    return value


def _key(key: Any, source: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (int, float, bool)):
        return str(key)
    raise DocumentError(f"{source}: a key must be a string, not {key!r}")
