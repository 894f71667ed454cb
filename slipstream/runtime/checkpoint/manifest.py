"""The checkpoint manifest: a versioned JSON document listing every file with its SHA-256.

A checkpoint directory is complete exactly when its manifest is in place. The
manifest is JSON, never pickle, so reading it runs no code; it carries its own
checksum (over its canonical form without that field), the job's fingerprint, and
for every operator where each subtask's state files are. Everything in it is
checked before any state file is unpickled.

Keyed state files are shared between checkpoints (incremental checkpoints): they live in
the storage directory's ``shared/`` folder, named by their SHA-256, and ``shared`` lists
every one a checkpoint uses with its checksum and size, as ``files`` lists its own. A
subtask's keyed state is its ``keyed_states`` (every entry) followed by ``keyed_deltas``,
layers of the entries changed since, applied in order (a value None: removed). Segments of
iteration replay caches (``<sha256>.seg``, see :mod:`slipstream.operators.segments`)
are shared files too, referred to from inside operator state.

A subtask checkpointed while it buffered its backlog also has ``backlog`` (a file of the
checkpoint's own) and ``backlog_files``: the shared files it refers to by position (its spilled
runs and in-memory tail, see :mod:`slipstream.runtime.checkpoint.snapshot`); both are left out
of the manifest otherwise, so manifests without them read as before. A keyed operator's timers
are a file of the checkpoint's own (``timers``), written by the checkpoint writer.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from slipstream.errors import CorruptCheckpointError

MANIFEST_NAME = "_manifest.json"
MANIFEST_TEMP_NAME = "_manifest.json.tmp"
FORMAT_NAME = "slipstream-checkpoint"
FORMAT_VERSION = 4
SUPPORTED_VERSIONS = (1, 2, 3, 4)
"""Version 4 may keep a keyed operator's timers in a file of their own (``timers``: version 3 has
them in its operator state); version 3 keeps keyed state in shared files (``shared``, ``keyed_deltas``); version 2 lists
keyed state per state (``keyed_states``: Arrow or pickle files) in the checkpoint's directory;
version 1 had one pickled keyed file per subtask (``keyed``). All are read."""
SHARED_DIR = "shared"
_SHARED_NAME = re.compile(r"^shared/[0-9a-f]{64}\.(arrow|pkl|seg|sst)$")
"""A shared file's name in a manifest: nothing else, so a manifest cannot point outside the storage."""


def shared_name(data: bytes | memoryview, extension: str) -> tuple[str, dict[str, Any]]:
    """The content-addressed name of a shared file, and its manifest entry (checksum, size)."""
    digest = sha256_hex(data)
    return f"{SHARED_DIR}/{digest}.{extension}", {"sha256": digest, "size": len(data)}


def segment_name(digest: str) -> str:
    """The shared file of a replay cache segment of SHA-256 ``digest``."""
    return f"{SHARED_DIR}/{digest}.seg"


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class SubtaskFiles:
    """The state files of one operator subtask (file names inside the checkpoint directory)."""

    keyed: str | None = None  # version 1: every keyed state in one pickle file
    operator: str | None = None
    key_groups: tuple[int, int] | None = None  # [start, end) of the keyed files' key groups
    keyed_states: list[dict[str, str]] = field(default_factory=list)  # {"state", "file", "format"}
    keyed_deltas: list[list[dict[str, str]]] = field(default_factory=list)  # changes since, layer by layer
    backlog: str | None = None  # a sorting operator's buffered backlog (pickled)
    backlog_files: list[str] = field(default_factory=list)  # the shared files ``backlog`` refers to
    timers: str | None = None  # the timers of a keyed operator (pickled), taken out of its operator state

    def encode(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "keyed": self.keyed, "operator": self.operator,
            "key_groups": list(self.key_groups) if self.key_groups else None,
            "keyed_states": [dict(f) for f in self.keyed_states],
            "keyed_deltas": [[dict(f) for f in layer] for layer in self.keyed_deltas]}
        if self.backlog is not None:
            body.update(backlog=self.backlog, backlog_files=list(self.backlog_files))
        if self.timers is not None:
            body["timers"] = self.timers
        return body

    @staticmethod
    def decode(body: dict[str, Any]) -> SubtaskFiles:
        backlog_files = [str(name) for name in body.get("backlog_files", ())]
        for name in backlog_files:
            if not _SHARED_NAME.match(name):
                raise ValueError(f"backlog file name {name!r}")
        backlog, timers = body.get("backlog"), body.get("timers")
        return SubtaskFiles(body["keyed"], body["operator"],
                            tuple(body["key_groups"]) if body["key_groups"] else None,
                            _state_files(body.get("keyed_states", ())),
                            [_state_files(layer) for layer in body.get("keyed_deltas", ())],
                            None if backlog is None else str(backlog), backlog_files,
                            None if timers is None else str(timers))


@dataclass
class OperatorEntry:
    uid: str
    kind: str
    parallelism: int
    max_parallelism: int
    subtasks: list[SubtaskFiles] = field(default_factory=list)


@dataclass
class Manifest:
    checkpoint_id: int
    job_name: str
    job_fingerprint: str
    created_ms: int
    mode: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {"sha256", "size"}
    shared: dict[str, dict[str, Any]] = field(default_factory=dict)  # shared/<sha256>.<ext> -> the same
    operators: dict[str, OperatorEntry] = field(default_factory=dict)

    def backlog_file_names(self) -> set[str]:
        """The shared files the subtasks' buffered backlogs refer to (read when restored, not before)."""
        return {name for entry in self.operators.values() for subtask in entry.subtasks
                for name in subtask.backlog_files}

    # -- encoding ---------------------------------------------------------------------------------
    def _body(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "checkpoint_id": self.checkpoint_id,
            "job_name": self.job_name,
            "job_fingerprint": self.job_fingerprint,
            "created_ms": self.created_ms,
            "mode": self.mode,
            "files": {name: dict(info) for name, info in sorted(self.files.items())},
            "shared": {name: dict(info) for name, info in sorted(self.shared.items())},
            "operators": {
                uid: {"kind": entry.kind, "parallelism": entry.parallelism,
                      "max_parallelism": entry.max_parallelism,
                      "subtasks": [s.encode() for s in entry.subtasks]}
                for uid, entry in sorted(self.operators.items())},
        }

    def encode(self) -> bytes:
        body = self._body()
        body["manifest_sha256"] = sha256_hex(_canonical(body))
        return json.dumps(body, indent=1, sort_keys=True).encode("utf-8")

    @staticmethod
    def decode(data: bytes, checkpoint: str) -> Manifest:
        """Parse and self-check a manifest; any damage raises :class:`CorruptCheckpointError`."""
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptCheckpointError(f"the manifest is not valid JSON ({exc}); it is truncated or damaged",
                                         checkpoint=checkpoint, file=MANIFEST_NAME) from None
        if not isinstance(body, dict) or body.get("format") != FORMAT_NAME:
            raise CorruptCheckpointError("the manifest is not a slipstream checkpoint manifest",
                                         checkpoint=checkpoint, file=MANIFEST_NAME,
                                         expected=repr(FORMAT_NAME), actual=repr(
                                             body.get("format") if isinstance(body, dict) else type(body).__name__))
        version = body.get("version")
        if version not in SUPPORTED_VERSIONS:
            raise CorruptCheckpointError(
                "the manifest has a format version this slipstream cannot read",
                checkpoint=checkpoint, file=MANIFEST_NAME,
                expected=f"version in {list(SUPPORTED_VERSIONS)}", actual=f"version {version!r}")
        claimed = body.pop("manifest_sha256", None)
        actual = sha256_hex(_canonical(body))
        if claimed != actual:
            raise CorruptCheckpointError("the manifest's own checksum does not match its contents",
                                         checkpoint=checkpoint, file=MANIFEST_NAME,
                                         expected=f"sha256 {claimed}", actual=f"sha256 {actual}")
        try:
            operators = {}
            for uid, entry in body["operators"].items():
                subtasks = [SubtaskFiles.decode(s) for s in entry["subtasks"]]
                operators[uid] = OperatorEntry(uid, entry["kind"], int(entry["parallelism"]),
                                               int(entry["max_parallelism"]), subtasks)
            shared = dict(body.get("shared", {}))
            for name in shared:
                if not _SHARED_NAME.match(name):
                    raise ValueError(f"shared file name {name!r}")
            return Manifest(int(body["checkpoint_id"]), str(body["job_name"]), str(body["job_fingerprint"]),
                            int(body["created_ms"]), str(body["mode"]), dict(body["files"]), shared, operators)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptCheckpointError(f"the manifest lacks or mangles a field ({exc!r})",
                                         checkpoint=checkpoint, file=MANIFEST_NAME) from None


def _state_files(files: Any) -> list[dict[str, str]]:
    return [{"state": str(f["state"]), "file": str(f["file"]), "format": str(f["format"])} for f in files]


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
