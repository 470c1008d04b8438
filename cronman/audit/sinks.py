"""Where the audit objects go: a local directory, or an S3-compatible bucket.

Both keep the two promises the exporter relies on: ``put`` returns only once
the object is durable (an S3 PUT answered 200; locally a written, fsynced
file renamed into place and its directory fsynced), and an object is either
whole or absent (S3 PUTs are atomic; a local rename is). ``put_if_absent``
creates an object only where none exists (S3 ``If-None-Match: *``; locally
``link(2)``, which fails on an existing name).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse


class SinkError(RuntimeError):
    """The storage refused or failed a write or a read (retried by the exporter)."""


class ObjectSink(Protocol):
    def put(self, key: str, body: bytes) -> None:
        """Store ``body`` at ``key`` (replacing any object there); durable on return."""

    def put_if_absent(self, key: str, body: bytes) -> bool:
        """Store ``body`` at ``key`` unless an object is there; False if one is."""

    def get(self, key: str) -> bytes | None:
        """The object at ``key``, or None."""

    def exists(self, key: str) -> bool: ...

    def keys(self, prefix: str = "") -> Iterator[str]:
        """Every key under ``prefix``, in lexicographic order."""

    def describe(self) -> str:
        """Where the objects go (for logs)."""


class LocalSink:
    """Objects as files under a root directory (the embedded default)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise SinkError(f"object key {key!r} leaves the audit directory")
        return path

    def _write_temp(self, path: Path, body: bytes) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    @staticmethod
    def _sync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, key: str, body: bytes) -> None:
        path = self._path(key)
        try:
            tmp = self._write_temp(path, body)
            os.replace(tmp, path)
            self._sync_dir(path.parent)
        except OSError as exc:
            raise SinkError(f"cannot write {path}: {exc}") from exc

    def put_if_absent(self, key: str, body: bytes) -> bool:
        path = self._path(key)
        try:
            tmp = self._write_temp(path, body)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            self._sync_dir(path.parent)
            return True
        except OSError as exc:
            raise SinkError(f"cannot write {path}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SinkError(f"cannot read {key}: {exc}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def keys(self, prefix: str = "") -> Iterator[str]:
        found: list[str] = []
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                if name.startswith("."):
                    continue  # a temporary file of a write in progress (or killed)
                key = os.path.relpath(os.path.join(dirpath, name), self.root)
                key = key.replace(os.sep, "/")
                if key.startswith(prefix):
                    found.append(key)
        yield from sorted(found)

    def describe(self) -> str:
        return str(self.root)


class S3Sink:
    """Objects in an S3-compatible bucket under a key prefix (boto3)."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 client: Any = None) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client or boto3.client(
            "s3", endpoint_url=endpoint_url,
            config=Config(retries={"max_attempts": 5, "mode": "standard"},
                          connect_timeout=5, read_timeout=30))

    def _key(self, key: str) -> str:
        return self.prefix + key

    def put(self, key: str, body: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body)
        except Exception as exc:
            raise SinkError(f"cannot write s3://{self.bucket}/{self._key(key)}: {exc}") from exc

    def put_if_absent(self, key: str, body: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body,
                                   IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                return False
            raise SinkError(f"cannot write s3://{self.bucket}/{self._key(key)}: {exc}") from exc
        except Exception as exc:
            raise SinkError(f"cannot write s3://{self.bucket}/{self._key(key)}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            return bytes(answer["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise SinkError(f"cannot read s3://{self.bucket}/{self._key(key)}: {exc}") from exc
        except Exception as exc:
            raise SinkError(f"cannot read s3://{self.bucket}/{self._key(key)}: {exc}") from exc

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise SinkError(f"cannot read s3://{self.bucket}/{self._key(key)}: {exc}") from exc
        except Exception as exc:
            raise SinkError(f"cannot read s3://{self.bucket}/{self._key(key)}: {exc}") from exc

    def keys(self, prefix: str = "") -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
                for item in page.get("Contents", []):
                    yield str(item["Key"])[len(self.prefix):]
        except Exception as exc:
            raise SinkError(f"cannot list s3://{self.bucket}/{self._key(prefix)}: {exc}") from exc

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def open_sink(url: str, *, s3_endpoint_url: str | None = None) -> LocalSink | S3Sink:
    """``s3://bucket/prefix``, ``file:///path`` or a plain path."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"CRONMAN_AUDIT_URL {url!r} names no bucket")
        return S3Sink(parsed.netloc, parsed.path, endpoint_url=s3_endpoint_url)
    if parsed.scheme == "file":
        return LocalSink(parsed.path)
    if parsed.scheme and len(parsed.scheme) > 1:
        raise ValueError(f"CRONMAN_AUDIT_URL {url!r}: use s3://, file:// or a path")
    return LocalSink(url)
