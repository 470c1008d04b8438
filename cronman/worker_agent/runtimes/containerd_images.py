"""Images in containerd: import an archive, resolve what a container needs.

Import (``import_archive``) reads an OCI image layout archive (``index.json``,
``blobs/``) or a ``docker save`` archive (``manifest.json``), writes every
blob into containerd's content store with the garbage-collection labels that
tie index -> manifest -> config/layers -> unpacked snapshot together, unpacks
the layers into snapshots (diff service, one commit per layer named by its
chain id) and records the image under each name. All of it under a
containerd lease, so that nothing is collected half-way.

``resolve`` gives the container side: the image config (entrypoint, cmd,
env, workdir) and the chain id of its top layer (the snapshot a container's
root file system is prepared from). Results are cached by image digest.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from google.protobuf import field_mask_pb2

from cronman.worker_agent.runtime import ImageNotFound, RuntimeError_
from cronman.worker_agent.runtimes.containerd_api.services.content.v1 import content_pb2
from cronman.worker_agent.runtimes.containerd_api.services.diff.v1 import diff_pb2
from cronman.worker_agent.runtimes.containerd_api.services.images.v1 import images_pb2
from cronman.worker_agent.runtimes.containerd_api.services.leases.v1 import leases_pb2
from cronman.worker_agent.runtimes.containerd_api.services.snapshots.v1 import snapshots_pb2
from cronman.worker_agent.runtimes.containerd_api.types import descriptor_pb2
from cronman.worker_agent.runtimes.containerd_client import (
    ContainerdClient,
    already_exists,
    not_found,
)

WRITE_CHUNK = 1024 * 1024
REF_NAME = "org.opencontainers.image.ref.name"
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPE_OCI = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_TYPE_DOCKER = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE_DOCKER = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE_DOCKER = "application/vnd.docker.image.rootfs.diff.tar"
PLATFORM = {"os": "linux", "architecture": "amd64"}


@dataclass(frozen=True, slots=True)
class ResolvedImage:
    """What a container of an image needs."""

    name: str
    digest: str  # of the image's target (index or manifest)
    config: dict[str, Any]  # the ``config`` object of the image config
    chain_id: str  # the snapshot of the top layer


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The chain id of each layer (OCI image spec: the parent chain + its diff id)."""
    out: list[str] = []
    for diff_id in diff_ids:
        if not out:
            out.append(diff_id)
        else:
            out.append("sha256:" + hashlib.sha256(f"{out[-1]} {diff_id}".encode()).hexdigest())
    return out


class ImageStore:
    """containerd images of one namespace: import and resolve."""

    def __init__(self, client: ContainerdClient, snapshotter: str) -> None:
        self.client = client
        self.snapshotter = snapshotter
        self._resolved: dict[str, ResolvedImage] = {}  # by name + digest

    # -- reading ----------------------------------------------------------

    async def read_blob(self, digest: str, lease: str | None = None) -> bytes:
        c = self.client
        chunks = []
        call = c.content.Read(content_pb2.ReadContentRequest(digest=digest),
                              **c.kw(lease, timeout=60))
        async for part in call:
            chunks.append(part.data)
        return b"".join(chunks)

    async def read_json(self, digest: str, lease: str | None = None) -> Any:
        return json.loads(await self.read_blob(digest, lease))

    async def resolve(self, name: str) -> ResolvedImage:
        """The config and top snapshot of image ``name``; ``ImageNotFound``
        when the namespace has no such image."""
        c = self.client
        try:
            reply = await c.images.Get(images_pb2.GetImageRequest(name=name), **c.kw())
        except Exception as exc:
            if not_found(exc):
                raise ImageNotFound(
                    f"image {name!r} is not in containerd namespace {c.namespace!r}: import it "
                    f"with `cronman agent images import FILE.tar` on the agent's host") from None
            raise
        target = reply.image.target
        key = f"{name}@{target.digest}"
        cached = self._resolved.get(key)
        if cached is not None:
            return cached
        manifest_digest = target.digest
        if target.media_type in INDEX_TYPES:
            manifest_digest = _pick_manifest(await self.read_json(target.digest), name)
        manifest = await self.read_json(manifest_digest)
        config_blob = await self.read_json(manifest["config"]["digest"])
        diff_ids = list((config_blob.get("rootfs") or {}).get("diff_ids") or [])
        if not diff_ids:
            raise RuntimeError_(f"image {name!r} has no layers")
        resolved = ResolvedImage(name=name, digest=target.digest,
                                 config=dict(config_blob.get("config") or {}),
                                 chain_id=chain_ids(diff_ids)[-1])
        self._resolved[key] = resolved
        return resolved

    # -- importing --------------------------------------------------------

    async def import_archive(self, path: Path) -> list[str]:
        """Import an OCI layout or ``docker save`` archive; returns the image names."""
        c = self.client
        lease = f"cronman-import-{uuid.uuid4().hex[:12]}"
        expire = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        await c.leases.Create(leases_pb2.CreateRequest(
            id=lease, labels={"containerd.io/gc.expire": expire}), **c.kw())
        try:
            with tarfile.open(path) as tar:
                members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
                if "index.json" in members:
                    images = await self._import_oci(tar, members, lease)
                elif "manifest.json" in members:
                    images = await self._import_docker(tar, members, lease)
                else:
                    raise RuntimeError_(f"{path}: neither an OCI image layout (index.json) "
                                        "nor a docker save archive (manifest.json)")
            for name, (desc, manifest) in images.items():
                await self._unpack(manifest, lease)
                await self._record(name, desc, lease)
            return sorted(images)
        finally:
            await c.leases.Delete(leases_pb2.DeleteRequest(id=lease), **c.kw())

    async def _import_oci(self, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo],
                          lease: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        index = json.loads(_read(tar, members["index.json"]))
        images: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for entry in index.get("manifests") or []:
            name = (entry.get("annotations") or {}).get(REF_NAME)
            if not name:
                continue
            manifest_entry = entry
            if entry.get("mediaType") in INDEX_TYPES:
                inner = json.loads(_read(tar, members[_blob_path(entry["digest"])]))
                chosen = _pick_manifest(inner, name)
                manifest_entry = next(m for m in inner["manifests"] if m["digest"] == chosen)
                await self._write(entry, _opener(tar, members, entry["digest"]), lease,
                                  {"containerd.io/gc.ref.content.m.0": chosen})
            manifest = json.loads(_read(tar, members[_blob_path(manifest_entry["digest"])]))
            for blob in [manifest["config"], *manifest["layers"]]:
                await self._write(blob, _opener(tar, members, blob["digest"]), lease, {})
            await self._write(manifest_entry, _opener(tar, members, manifest_entry["digest"]),
                              lease, _manifest_refs(manifest))
            images[name] = (entry, manifest)
        if not images:
            raise RuntimeError_("the archive names no image (index.json has no "
                                f"{REF_NAME} annotation)")
        return images

    async def _import_docker(self, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo],
                             lease: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        images: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for item in json.loads(_read(tar, members["manifest.json"])):
            config = _read(tar, members[item["Config"]])
            config_desc = {"mediaType": CONFIG_TYPE_DOCKER, "size": len(config),
                           "digest": "sha256:" + hashlib.sha256(config).hexdigest()}
            await self._write(config_desc, lambda data=config: _bytes_io(data), lease, {})
            layers = []
            for layer_path in item["Layers"]:
                member = members[layer_path]
                digest = _digest_member(tar, member)
                desc = {"mediaType": LAYER_TYPE_DOCKER, "size": member.size, "digest": digest}
                await self._write(desc, lambda m=member: tar.extractfile(m), lease, {})
                layers.append(desc)
            manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE_DOCKER,
                        "config": config_desc, "layers": layers}
            raw = json.dumps(manifest).encode()
            desc = {"mediaType": MANIFEST_TYPE_DOCKER, "size": len(raw),
                    "digest": "sha256:" + hashlib.sha256(raw).hexdigest()}
            await self._write(desc, lambda data=raw: _bytes_io(data), lease,
                              _manifest_refs(manifest))
            for tag in item.get("RepoTags") or []:
                images[_normalise_docker_name(tag)] = (desc, manifest)
        if not images:
            raise RuntimeError_("the archive names no image (manifest.json has no RepoTags)")
        return images

    async def _write(self, desc: dict[str, Any], open_data: Any, lease: str,
                     labels: dict[str, str]) -> None:
        """Write one blob unless present, then set its GC labels."""
        c = self.client
        digest = desc["digest"]
        try:
            await c.content.Info(content_pb2.InfoRequest(digest=digest), **c.kw(lease))
            present = True
        except Exception as exc:
            if not not_found(exc):
                raise
            present = False
        if not present:
            ref = f"cronman-import-{digest}"

            async def requests() -> AsyncIterator[content_pb2.WriteContentRequest]:
                f = open_data()
                offset = 0
                try:
                    while True:
                        data = f.read(WRITE_CHUNK)
                        if not data:
                            break
                        yield content_pb2.WriteContentRequest(
                            action=content_pb2.WRITE, ref=ref, total=desc["size"],
                            expected=digest, offset=offset, data=data)
                        offset += len(data)
                finally:
                    f.close()
                yield content_pb2.WriteContentRequest(
                    action=content_pb2.COMMIT, ref=ref, total=desc["size"], expected=digest,
                    offset=offset, labels=labels)

            try:
                async for _ in c.content.Write(requests(), **c.kw(lease, timeout=300)):
                    pass
            except Exception as exc:
                if not already_exists(exc):
                    raise
        if labels:
            await c.content.Update(content_pb2.UpdateRequest(
                info=content_pb2.Info(digest=digest, labels=labels),
                update_mask=field_mask_pb2.FieldMask(paths=[f"labels.{k}" for k in labels])),
                **c.kw(lease))

    async def _unpack(self, manifest: dict[str, Any], lease: str) -> None:
        """Apply the layers into committed snapshots (skipping present ones)
        and label the config with the top one, which keeps them from the GC."""
        c = self.client
        config = await self.read_json(manifest["config"]["digest"], lease)
        diff_ids = list(config["rootfs"]["diff_ids"])
        chains = chain_ids(diff_ids)
        parent = ""
        for layer, diff_id, chain in zip(manifest["layers"], diff_ids, chains, strict=True):
            try:
                await c.snapshots.Stat(snapshots_pb2.StatSnapshotRequest(
                    snapshotter=self.snapshotter, key=chain), **c.kw(lease))
                parent = chain
                continue
            except Exception as exc:
                if not not_found(exc):
                    raise
            key = f"extract-{uuid.uuid4().hex[:12]} {chain}"
            prepared = await c.snapshots.Prepare(snapshots_pb2.PrepareSnapshotRequest(
                snapshotter=self.snapshotter, key=key, parent=parent), **c.kw(lease))
            try:
                applied = await c.diff.Apply(diff_pb2.ApplyRequest(
                    diff=descriptor_pb2.Descriptor(media_type=layer["mediaType"],
                                                   digest=layer["digest"], size=layer["size"]),
                    mounts=prepared.mounts), **c.kw(lease, timeout=300))
                if applied.applied.digest != diff_id:
                    raise RuntimeError_(f"layer {layer['digest']} unpacked to "
                                        f"{applied.applied.digest}, expected {diff_id}")
                await c.snapshots.Commit(snapshots_pb2.CommitSnapshotRequest(
                    snapshotter=self.snapshotter, name=chain, key=key), **c.kw(lease))
            except Exception:
                await c.snapshots.Remove(snapshots_pb2.RemoveSnapshotRequest(
                    snapshotter=self.snapshotter, key=key), **c.kw(lease))
                raise
            parent = chain
        await c.content.Update(content_pb2.UpdateRequest(
            info=content_pb2.Info(digest=manifest["config"]["digest"], labels={
                f"containerd.io/gc.ref.snapshot.{self.snapshotter}": chains[-1]}),
            update_mask=field_mask_pb2.FieldMask(
                paths=[f"labels.containerd.io/gc.ref.snapshot.{self.snapshotter}"])),
            **c.kw(lease))

    async def _record(self, name: str, desc: dict[str, Any], lease: str) -> None:
        c = self.client
        image = images_pb2.Image(name=name, target=descriptor_pb2.Descriptor(
            media_type=desc.get("mediaType") or MANIFEST_TYPE_OCI, digest=desc["digest"],
            size=desc["size"]))
        try:
            await c.images.Create(images_pb2.CreateImageRequest(image=image), **c.kw(lease))
        except Exception as exc:
            if not already_exists(exc):
                raise
            await c.images.Update(images_pb2.UpdateImageRequest(
                image=image, update_mask=field_mask_pb2.FieldMask(paths=["target"])),
                **c.kw(lease))
        self._resolved = {k: v for k, v in self._resolved.items() if v.name != name}


def _pick_manifest(index: dict[str, Any], name: str) -> str:
    manifests = index.get("manifests") or []
    for m in manifests:
        platform = m.get("platform") or {}
        if all(platform.get(k) == v for k, v in PLATFORM.items()):
            return str(m["digest"])
    if len(manifests) == 1:
        return str(manifests[0]["digest"])
    raise ImageNotFound(f"image {name!r} has no linux/amd64 manifest")


def _manifest_refs(manifest: dict[str, Any]) -> dict[str, str]:
    refs = {"containerd.io/gc.ref.content.config": manifest["config"]["digest"]}
    for i, layer in enumerate(manifest["layers"]):
        refs[f"containerd.io/gc.ref.content.l.{i}"] = layer["digest"]
    return refs


def _blob_path(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    if f is None:
        raise RuntimeError_(f"archive member {member.name} cannot be read")
    with f:
        return f.read()


def _opener(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], digest: str) -> Any:
    path = _blob_path(digest)
    if path not in members:
        raise RuntimeError_(f"the archive lacks blob {digest}")
    return lambda: tar.extractfile(members[path])


def _bytes_io(data: bytes) -> IO[bytes]:
    import io

    return io.BytesIO(data)


def _digest_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    h = hashlib.sha256()
    f = tar.extractfile(member)
    if f is None:
        raise RuntimeError_(f"archive member {member.name} cannot be read")
    with f:
        while chunk := f.read(WRITE_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _normalise_docker_name(tag: str) -> str:
    """``busybox:1`` -> ``docker.io/library/busybox:1`` (containerd's full names)."""
    first = tag.split("/", 1)[0]
    if "/" not in tag:
        return f"docker.io/library/{tag}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{tag}"
    return tag
