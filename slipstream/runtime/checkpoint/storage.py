"""Checkpoint storage: one directory per checkpoint, written data first and manifest last.

Layout::

    <storage dir>/            (0700)
        chk-000007/           (0700)
            op0-0.keyed-0.arrow  state files, each written then fsynced: keyed state per state
            op0-0.keyed-1.pkl    (Arrow when columnar, pickle otherwise), operator state
            op1-0.state.pkl
            _manifest.json    written as _manifest.json.tmp, fsynced, renamed, directory fsynced
                              (on an object store: uploaded last under its own name, which
                              makes it appear whole or not at all)
        shared/               keyed state files and replay cache segments (.seg), named by their
            <sha256>.arrow    SHA-256 and used by every checkpoint whose manifest lists them (incremental checkpoints);
                              each written as <name>.tmp, fsynced, renamed, before any manifest
                              that lists it; deleted once no complete checkpoint lists it

A checkpoint is complete exactly when its manifest is in place. Reading verifies
everything — the manifest's own checksum and format version, the job fingerprint,
that the directory holds exactly the files listed, and each file's size and SHA-256 —
before the caller unpickles a single byte.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from slipstream.errors import CorruptCheckpointError, DiskFullError
from slipstream.filesystem import FileSystem, copy_directory, filesystem_of, resolve
from slipstream.operators.segments import Segment
from slipstream.runtime.checkpoint.manifest import (
    MANIFEST_NAME,
    MANIFEST_TEMP_NAME,
    SHARED_DIR,
    Manifest,
    sha256_hex,
)

log = logging.getLogger("slipstream.checkpoint")

_CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")


def checkpoint_dir_name(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id:06d}"


COPY_CHUNK = 1 << 20
"""Bytes read at a time when a stored file is hashed or copied rather than read whole."""


@dataclass
class StoredFile:
    """A verified file of a checkpoint read when it is used, not with the checkpoint: the spilled
    runs of a backlog, which may be larger than memory (see :mod:`slipstream.operators.spill_file`)."""

    fs: FileSystem
    path: str
    size: int

    def read(self) -> bytes:
        return self.fs.read_file(self.path)

    def copy_to(self, target: str) -> int:
        """Put the file at the local path ``target``: a hard link when it is on the same local disk (the
        file never changes, and pruning only unlinks it), a copy otherwise; its size."""
        if self.fs.local:
            try:
                os.link(self.path, target)
                return self.size
            except OSError:
                pass  # another device, or a file system without hard links: copy
        with self.fs.open_input(self.path) as source, open(target, "wb") as sink:
            shutil.copyfileobj(source, sink, COPY_CHUNK)
        return self.size


class CheckpointFiles(dict[str, Any]):
    """A verified checkpoint's files by name, and the replay cache segments decoded from its shared
    files so far (so every pickle of the checkpoint that refers to a segment gets the same records)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.segments: dict[str, Segment] = {}


@dataclass
class VerifiedCheckpoint:
    """A checkpoint whose every file matched its manifest; ``files`` holds their bytes."""

    path: str
    manifest: Manifest
    files: CheckpointFiles
    stored: dict[str, StoredFile] = field(default_factory=dict)  # backlog files, read when restored

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id


class CheckpointStorage:
    """Checkpoints of one job in one directory (created private, mode 0700), local or at a URL
    (``s3://bucket/checkpoints``): ``fs`` defaults to the file system the directory lives on."""

    def __init__(self, directory: str, num_retained: int = 1, fs: FileSystem | None = None) -> None:
        if fs is None:
            fs, directory = resolve(directory, "checkpoint storage")
        self.directory = fs.normalize(directory)
        self.num_retained = max(1, num_retained)
        self.fs = fs
        self._listed: dict[int, frozenset[str]] = {}
        """The shared files each complete checkpoint's manifest lists, by id: a manifest never changes
        once in place, so pruning reads each once, not all of them after every checkpoint."""

    def ensure_directory(self) -> None:
        self.fs.makedirs(self.directory)

    def path_of(self, checkpoint_id: int) -> str:
        return os.path.join(self.directory, checkpoint_dir_name(checkpoint_id))

    # -- listing ----------------------------------------------------------------------------------
    def checkpoint_ids(self) -> list[int]:
        """Ids of every ``chk-*`` directory, complete or not, ascending."""
        if not self.fs.is_dir(self.directory):
            return []
        ids = []
        for name in self.fs.listdir(self.directory):
            match = _CHECKPOINT_DIR.match(name)
            if match and self.fs.is_dir(os.path.join(self.directory, name)):
                ids.append(int(match.group(1)))
        return sorted(ids)

    def is_complete(self, checkpoint_id: int) -> bool:
        return self.fs.exists(os.path.join(self.path_of(checkpoint_id), MANIFEST_NAME))

    def complete_ids(self) -> list[int]:
        return [i for i in self.checkpoint_ids() if self.is_complete(i)]

    def remove_incomplete(self) -> None:
        """Delete checkpoint directories without a manifest: leftovers of a crash while writing."""
        for checkpoint_id in self.checkpoint_ids():
            if not self.is_complete(checkpoint_id):
                log.info("removing incomplete checkpoint %s", self.path_of(checkpoint_id))
                self.fs.remove_tree(self.path_of(checkpoint_id))

    # -- writing ----------------------------------------------------------------------------------
    def write(self, manifest: Manifest, files: dict[str, bytes | memoryview],
              shared: dict[str, memoryview] | None = None) -> str:
        """Write a checkpoint durably; returns its directory. On failure nothing complete is left.

        Order: the new ``shared`` files (those not there yet, each written and fsynced under a
        temporary name, renamed; then their directory fsynced), the directory (and its entry in
        the parent), every data file written and fsynced, the manifest under a temporary name
        and fsynced, the directory fsynced, the manifest renamed into place, the directory
        fsynced again.
        """
        self.ensure_directory()
        path = self.path_of(manifest.checkpoint_id)
        if self.fs.exists(path):
            self.fs.remove_tree(path)
        try:
            self._write_shared(shared or {})
            self.fs.makedirs(path)
            self.fs.fsync_dir(self.directory)
            for name, data in files.items():
                self.fs.write_file(os.path.join(path, name), data)
                manifest.files[name] = {"sha256": sha256_hex(data), "size": len(data)}
            self._listed.pop(manifest.checkpoint_id, None)
            self.fs.publish_file(os.path.join(path, MANIFEST_NAME), manifest.encode(), MANIFEST_TEMP_NAME,
                                 what="checkpoint manifest")
            self._listed[manifest.checkpoint_id] = frozenset(manifest.shared)
        except Exception as exc:
            # A checkpoint without its manifest is incomplete and ignored; remove it so no
            # half-written checkpoint stays around (best effort: the disk may be full).
            self.fs.remove_tree(path)
            if isinstance(exc, OSError) and not isinstance(exc, DiskFullError) and exc.errno == 28:
                raise DiskFullError(getattr(exc, "filename", None) or path, "checkpoint", exc) from exc
            raise
        return path

    def _write_shared(self, shared: dict[str, memoryview]) -> None:
        """Write the shared files not yet stored (a name is its content's checksum)."""
        if not shared:
            return
        directory = os.path.join(self.directory, SHARED_DIR)
        self.fs.makedirs(directory)
        for name, data in shared.items():
            target = os.path.join(self.directory, name)
            if not self.fs.exists(target):
                self.fs.write_file(target + ".tmp", data)
                self.fs.rename(target + ".tmp", target)
        self.fs.fsync_dir(directory)
        self.fs.fsync_dir(self.directory)

    def prune(self, latest_id: int) -> None:
        """Keep the newest ``num_retained`` complete checkpoints up to ``latest_id``; delete the rest
        below it, then every shared file no complete checkpoint lists. The manifest goes first, so
        a crash mid-way leaves an incomplete directory."""
        complete = [i for i in self.complete_ids() if i <= latest_id]
        keep = set(complete[-self.num_retained:])
        for checkpoint_id in self.checkpoint_ids():
            if checkpoint_id < latest_id and checkpoint_id not in keep:
                path = self.path_of(checkpoint_id)
                manifest = os.path.join(path, MANIFEST_NAME)
                if self.fs.exists(manifest):
                    self.fs.remove(manifest)
                    self.fs.fsync_dir(path)
                self.fs.remove_tree(path)
        self._prune_shared()

    def _prune_shared(self) -> None:
        """Delete the shared files (and leftover temporary files) no complete checkpoint lists;
        nothing when a manifest cannot be read, as what it lists is then unknown."""
        directory = os.path.join(self.directory, SHARED_DIR)
        if not self.fs.is_dir(directory):
            return
        complete = self.complete_ids()
        self._listed = {i: self._listed[i] for i in complete if i in self._listed}
        listed: set[str] = set()
        for checkpoint_id in complete:
            if checkpoint_id not in self._listed:
                path = self.path_of(checkpoint_id)
                try:
                    manifest = Manifest.decode(self.fs.read_file(os.path.join(path, MANIFEST_NAME)), path)
                except CorruptCheckpointError:
                    return
                self._listed[checkpoint_id] = frozenset(manifest.shared)
            listed.update(self._listed[checkpoint_id])
        for name in self.fs.listdir(directory):
            if f"{SHARED_DIR}/{name}" not in listed:
                self.fs.remove(os.path.join(directory, name))

    def remove_all(self) -> None:
        self._listed.clear()
        for checkpoint_id in self.checkpoint_ids():
            self.fs.remove_tree(self.path_of(checkpoint_id))
        self.fs.remove_tree(os.path.join(self.directory, SHARED_DIR))

    # -- reading ----------------------------------------------------------------------------------
    def read_verified(self, path: str, fingerprint: str | None) -> VerifiedCheckpoint:
        """Read and verify the checkpoint in ``path`` (on this storage's file system or any other);
        raises :class:`CorruptCheckpointError`."""
        fs, path = (self.fs, self.fs.normalize(path)) if self.fs.owns(path) else resolve(path, "checkpoint")
        if not fs.is_dir(path):
            raise CorruptCheckpointError("the checkpoint directory does not exist", checkpoint=path)
        manifest_path = os.path.join(path, MANIFEST_NAME)
        if not fs.exists(manifest_path):
            raise CorruptCheckpointError("the checkpoint has no manifest: it is incomplete (the writer "
                                         "stopped before finishing it) or the manifest was deleted",
                                         checkpoint=path, file=MANIFEST_NAME)
        manifest = Manifest.decode(fs.read_file(manifest_path), path)
        match = _CHECKPOINT_DIR.match(os.path.basename(path))
        if match and int(match.group(1)) != manifest.checkpoint_id:
            raise CorruptCheckpointError("the manifest belongs to another checkpoint", checkpoint=path,
                                         file=MANIFEST_NAME, expected=f"checkpoint {int(match.group(1))}",
                                         actual=f"checkpoint {manifest.checkpoint_id}")
        if fingerprint is not None and manifest.job_fingerprint != fingerprint:
            raise CorruptCheckpointError(
                f"the checkpoint was written by another job ('{manifest.job_name}'): its operators "
                "(uids and kinds) differ from this job's", checkpoint=path, file=MANIFEST_NAME,
                expected=f"job fingerprint {fingerprint}", actual=f"job fingerprint {manifest.job_fingerprint}")
        present = set(fs.listdir(path)) - {MANIFEST_NAME}
        for name in sorted(present - set(manifest.files)):
            what = "a leftover temporary file" if name.endswith(".tmp") else "a file the manifest does not list"
            raise CorruptCheckpointError(f"the checkpoint holds {what} (copied in from elsewhere, or left "
                                         "by an interrupted write)", checkpoint=path, file=name)
        files = CheckpointFiles({name: _verified(fs, path, path, name, info, name in present)
                                 for name, info in sorted(manifest.files.items())})
        storage = os.path.dirname(path)
        backlog = manifest.backlog_file_names()
        stored = {}
        for name, info in sorted(manifest.shared.items()):
            exists = fs.exists(os.path.join(storage, name))
            if name in backlog:
                stored[name] = _verified_stored(fs, path, storage, name, info, exists)
            else:
                files[name] = _verified(fs, path, storage, name, info, exists)
        return VerifiedCheckpoint(path, manifest, files, stored)


def copy_checkpoint(source: str, target: str) -> None:
    """Copy the checkpoint in ``source`` into a new directory ``target`` (a savepoint's target, on
    any file system), with the shared files its manifest lists beside it, as in a storage directory."""
    source_fs, target_fs = filesystem_of(source), filesystem_of(target)
    manifest = Manifest.decode(source_fs.read_file(os.path.join(source, MANIFEST_NAME)), source)
    if manifest.shared:
        target_fs.makedirs(os.path.join(os.path.dirname(target), SHARED_DIR))
        for name in manifest.shared:
            content = source_fs.read_file(os.path.join(os.path.dirname(source), name))
            target_fs.write_file(os.path.join(os.path.dirname(target), name), content, what="savepoint file")
        target_fs.fsync_dir(os.path.join(os.path.dirname(target), SHARED_DIR))
    copy_directory(source, target)


def _verified(fs: FileSystem, checkpoint: str, directory: str, name: str, info: dict[str, Any],
              present: bool) -> bytes:
    """The contents of file ``name`` in ``directory``, listed by ``checkpoint``'s manifest as ``info``,
    once its size and SHA-256 match (a shared file is checked by every checkpoint that lists it)."""
    _check_present(checkpoint, name, info, present)
    data = fs.read_file(os.path.join(directory, name))
    _check_contents(checkpoint, name, info, len(data), sha256_hex(data))
    return data


def _verified_stored(fs: FileSystem, checkpoint: str, directory: str, name: str, info: dict[str, Any],
                     present: bool) -> StoredFile:
    """As :func:`_verified`, but the file is hashed a chunk at a time and handed over as a
    :class:`StoredFile`."""
    _check_present(checkpoint, name, info, present)
    path = os.path.join(directory, name)
    digest, size = hashlib.sha256(), 0
    with fs.open_input(path) as handle:
        while chunk := handle.read(COPY_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    _check_contents(checkpoint, name, info, size, digest.hexdigest())
    return StoredFile(fs, path, size)


def _check_present(checkpoint: str, name: str, info: dict[str, Any], present: bool) -> None:
    if not present:
        raise CorruptCheckpointError("a state file listed in the manifest is missing",
                                     checkpoint=checkpoint, file=name,
                                     expected=f"sha256 {info['sha256']}", actual="no file")


def _check_contents(checkpoint: str, name: str, info: dict[str, Any], size: int, digest: str) -> None:
    if size != info["size"]:
        raise CorruptCheckpointError("a state file has the wrong size (truncated or extended)",
                                     checkpoint=checkpoint, file=name,
                                     expected=f"{info['size']} bytes, sha256 {info['sha256']}",
                                     actual=f"{size} bytes, sha256 {digest}")
    if digest != info["sha256"]:
        raise CorruptCheckpointError("a state file's checksum does not match the manifest (damaged, "
                                     "or swapped in from another checkpoint or job)",
                                     checkpoint=checkpoint, file=name,
                                     expected=f"sha256 {info['sha256']}", actual=f"sha256 {digest}")
