"""What a task's state becomes in a checkpoint, and how it is put back, also at another parallelism.

Each operator subtask contributes its keyed state (the backend's entries grouped by key
group, so they can be redistributed), one file per state, its operator state
(``snapshot_state()``: source positions, a sink's pending files) in one file and its timers
in another. The task's turn at the barrier only takes them: the operator state is serialised
then, the keyed state is frozen as it is (copy-on-write, see
:mod:`slipstream.runtime.state.heap_backend`) and grouped, serialised and written
afterwards by the checkpoint writer's thread while processing goes on; the
checkpoint still holds the state exactly as it was at the barrier. Timers likewise: an operator
state that is a dict whose ``"timers"`` is a :class:`~slipstream.operators.timers.FrozenTimers`
(what a keyed operator's ``snapshot_state`` gives) has them read and pickled by the writer, into
``<op>.timers.pkl``, and put back under ``"timers"`` on restore.

Formats: keyed state whose keys and values are primitives (ints, floats, strings,
bools, bytes, None), lists of primitives (list state), dicts of primitives (map state)
or tuples of primitives (reducing/aggregating state such as ``(key, count)`` or
``(sum, count)``) is written as Arrow IPC (columnar, and reading it runs no code);
other keyed state — user objects, nested or mixed-type containers, windows'
``(key, window)`` entries — and operator state as pickle, the one format that
round-trips arbitrary Python objects (see :mod:`slipstream.runtime.checkpoint.state_files`).
Unpickling runs code, so a checkpoint directory must be trusted like the job's code;
slipstream verifies every file's SHA-256 against the manifest before reading anything,
which catches damage and mix-ups but is no defence against someone who can write the
manifest too.

Checkpoints are incremental: keyed state files are content-addressed and shared (see
:mod:`slipstream.runtime.checkpoint.manifest`). A subtask's first checkpoint writes every
entry; each later one writes only the entries changed since the previous completed one
(the backend tracks them, see :class:`~slipstream.runtime.state.heap_backend.KeyedStateView`)
as a new layer and references the earlier files, until the layers would hold more than
``DELTA_SHARE`` of the state's entries or number ``MAX_DELTAS``: then it writes every entry
again, and the old files go once no retained checkpoint uses them.

Backlog buffers: an operator sorting its backlog (FLIP-327) is checkpointed while it buffers.
Its ``snapshot_backlog()`` is pickled into a file of its own (``<op>.backlog.pkl``), except the
:class:`~slipstream.operators.spill_file.CheckpointFile` objects it holds — its spilled runs and
its in-memory tail as Arrow IPC segments — which the pickle refers to by position: each becomes a
shared file named by its SHA-256, so a run spilled before several checkpoints is stored once and
a checkpoint during a long backlog writes only the runs spilled and the records buffered since the last one.
On restore the operator's ``restore_backlog`` gets the same structure, each file's bytes in
place of its :class:`CheckpointFile` (or, restored from storage, a handle that hard-links or
copies it into the operator's spill directory: spilled runs are never read into memory). A
backlog checkpoint is restored at the same parallelism only: the buffers hold records by key,
in the arrival order of one subtask's inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slipstream.errors import CheckpointError, CorruptCheckpointError
from slipstream.operators.segments import Segment, SegmentReader, Sharing, dumps_plain_or_shared
from slipstream.operators.spill_file import CheckpointFile, StoredContents
from slipstream.operators.timers import FrozenTimers
from slipstream.runtime.checkpoint.manifest import (
    SHARED_DIR,
    Manifest,
    OperatorEntry,
    SubtaskFiles,
    segment_name,
    shared_name,
)
from slipstream.runtime.checkpoint.state_files import EXTENSIONS, decode_state_file
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range

if TYPE_CHECKING:
    from slipstream.runtime.state.heap_backend import FrozenView


MAX_DELTAS = 32
"""Layers of changes a subtask's keyed state may have before a checkpoint writes every entry again."""
DELTA_SHARE = 0.5
"""The share of the state's entries the layers of changes may hold (so restoring reads at most 1.5 times it)."""


@dataclass
class KeyedFiles:
    """The shared files of one subtask's keyed state in a checkpoint: every entry, then layers of changes."""

    base: list[dict[str, str]]
    deltas: list[list[dict[str, str]]]
    shared: dict[str, dict[str, Any]]  # every file's name -> {"sha256", "size"}
    base_entries: int
    delta_entries: int

    def extended(self, layer: list[dict[str, str]], infos: dict[str, dict[str, Any]], changed: int) -> KeyedFiles:
        """These files and one more layer of ``changed`` entries."""
        return KeyedFiles(self.base, [*self.deltas, layer] if layer else self.deltas, {**self.shared, **infos},
                          self.base_entries, self.delta_entries + changed)


@dataclass
class OperatorSnapshot:
    """One operator subtask's state at a checkpoint: its operator state serialised, its keyed
    state a frozen view for the checkpoint writer to serialise (:func:`encode_keyed`)."""

    uid: str
    kind: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    keyed: FrozenView | None
    key_groups: tuple[int, int] | None
    state: bytes | None
    name: str = ""
    taken_ms: float = 0.0  # how long taking it stopped the task
    keyed_files: KeyedFiles | None = None  # set by the checkpoint writer
    backlog: bytes | None = None  # a sorting operator's buffered backlog, pickled (files referred to by position)
    backlog_files: list[CheckpointFile] = field(default_factory=list)  # the files ``backlog`` refers to
    segments: dict[str, tuple[Segment, memoryview | None]] = field(default_factory=dict)
    """The shared segments ``state`` refers to, each with the bytes to write (None: stored already)."""
    keyed_contents: dict[str, bytes] | None = None
    """The keyed files' contents, once encoded where the state lives (:func:`shipped`)."""
    timers: FrozenTimers | dict[str, list[Any]] | None = None
    """The timers, taken out of the operator state (read by the writer; lists once :func:`shipped`)."""


def _dumps(value: Any, operator: Any, what: str, sharing: Sharing | None) -> bytes:
    try:
        return dumps_plain_or_shared(value, sharing)
    except Exception as exc:  # noqa: BLE001 - any pickling failure names the operator
        ctx = operator.ctx
        raise CheckpointError(f"operator '{ctx.name}' (uid '{ctx.uid}'), subtask {ctx.subtask_index + 1}: "
                              f"its {what} cannot be written to a checkpoint: {type(exc).__name__}: {exc}"
                              ) from exc


class _FilePickler(pickle.Pickler):
    """Pickles a state, putting each :class:`CheckpointFile` aside and in its place its position."""

    def __init__(self, out: io.BytesIO) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.files: list[CheckpointFile] = []

    def persistent_id(self, obj: Any) -> int | None:
        if isinstance(obj, CheckpointFile):
            self.files.append(obj)
            return len(self.files) - 1
        return None


class _FileUnpickler(pickle.Unpickler):
    """Unpickles a state of :class:`_FilePickler`, each file's bytes in place of its position."""

    def __init__(self, data: bytes, contents: list[bytes | StoredContents]) -> None:
        super().__init__(io.BytesIO(data))
        self.contents = contents

    def persistent_load(self, pid: Any) -> bytes | StoredContents:
        return self.contents[int(pid)]


def encode_backlog(state: Any, operator: Any) -> tuple[bytes, list[CheckpointFile]]:
    """``state`` (an operator's ``snapshot_backlog()``) pickled, and the files it refers to."""
    out = io.BytesIO()
    pickler = _FilePickler(out)
    try:
        pickler.dump(state)
    except Exception as exc:  # noqa: BLE001 - any pickling failure names the operator
        close_files(pickler.files)
        ctx = operator.ctx
        raise CheckpointError(f"operator '{ctx.name}' (uid '{ctx.uid}'), subtask {ctx.subtask_index + 1}: "
                              f"its buffered backlog cannot be written to a checkpoint: {type(exc).__name__}: "
                              f"{exc}") from exc
    return out.getvalue(), pickler.files


def decode_backlog(data: bytes, contents: list[bytes | StoredContents]) -> Any:
    """What :func:`encode_backlog` encoded, given the contents of the files it set aside, in order."""
    return _FileUnpickler(data, contents).load()


def close_files(files: list[CheckpointFile]) -> None:
    for file in files:
        file.close()


def close_snapshot_files(snapshots: list[OperatorSnapshot]) -> None:
    """The checkpoint of ``snapshots`` is written or given up: release the backlog files it held."""
    for snap in snapshots:
        close_files(snap.backlog_files)


def encode_keyed(snap: OperatorSnapshot) -> tuple[KeyedFiles, dict[str, memoryview]]:
    """The shared files of ``snap``'s keyed state, and the contents of those written now (in the
    checkpoint writer): every entry, or only those changed since the previous completed checkpoint."""
    view = snap.keyed
    assert view is not None  # only a snapshot with keyed state has keyed files
    base = view.base
    incremental = base is not None and len(base.deltas) < MAX_DELTAS \
        and base.delta_entries + view.changed <= DELTA_SHARE * base.base_entries
    encoded, entries = _encoded(snap, incremental)
    layer, infos, contents = [], {}, {}
    for state, kind, data in encoded:
        name, infos[name] = shared_name(data, EXTENSIONS[kind])
        layer.append({"state": state, "file": name, "format": kind})
        contents[name] = data
    if incremental:
        return base.extended(layer, infos, entries), contents
    return KeyedFiles(layer, [], infos, entries, 0), contents


def _encoded(snap: OperatorSnapshot, incremental: bool) -> tuple[list[tuple[str, str, memoryview]], int]:
    try:
        assert snap.keyed is not None  # only a snapshot with keyed state has keyed files
        return snap.keyed.encode_layer(incremental)
    except Exception as exc:  # noqa: BLE001 - any serialisation failure names the operator
        raise CheckpointError(f"operator '{snap.name}' (uid '{snap.uid}'), subtask {snap.subtask_index + 1}: "
                              f"its keyed state cannot be written to a checkpoint: {type(exc).__name__}: {exc}"
                              ) from exc


def shipped(snap: OperatorSnapshot) -> OperatorSnapshot:
    """``snap`` as it can travel to another process: its keyed state encoded now (in the process
    that holds it) and every file and segment as bytes. The original keeps the frozen view and its
    ``keyed_files``, so :func:`commit_keyed` there makes them the base of the next checkpoint. The
    encoding is done in the task's turn, so it counts in the time the snapshot stopped the task."""
    started = time.perf_counter()
    contents: dict[str, bytes] | None = None
    if snap.keyed is not None:
        snap.keyed_files, encoded = encode_keyed(snap)
        contents = {name: bytes(data) for name, data in encoded.items()}
    files = [CheckpointFile(data=bytes(file.contents()), sha256=file.digest()) for file in snap.backlog_files]
    segments: dict[str, tuple[Segment, memoryview | None]] = {}
    for digest, (segment, data) in snap.segments.items():
        copy = Segment(None, segment.records)
        copy.digest, copy.size = segment.digest, segment.size
        segments[digest] = (copy, None if data is None else memoryview(data.tobytes()))
    timers = None if snap.timers is None else dict(snap.timers.lists()) if isinstance(snap.timers, FrozenTimers) \
        else snap.timers
    return dataclasses.replace(snap, keyed=None, backlog_files=files, segments=segments, keyed_contents=contents,
                               timers=timers, taken_ms=snap.taken_ms + (time.perf_counter() - started) * 1000)


def snapshot_task(task: Any, sharing: Sharing | None = None) -> list[OperatorSnapshot]:
    """Take the state of every operator of ``task``'s chain: serialise the operator state (referring
    to the shared segments of ``sharing``, by default those the chain keeps), freeze the keyed
    state (the checkpoint releases it once written or given up: :func:`release_task`)."""
    if sharing is None:
        sharing = Sharing.of(task.operators)
    result = []
    for operator in task.operators:
        started = time.perf_counter()
        ctx = operator.ctx
        keyed = key_groups = None
        if ctx.keyed_backend is not None:
            keyed = ctx.keyed_backend.freeze()
            groups = key_group_range(ctx.max_parallelism, ctx.parallelism, ctx.subtask_index)
            key_groups = (groups.start, groups.stop)
        state = operator.snapshot_state()
        timers = None
        if isinstance(state, dict) and isinstance(state.get("timers"), FrozenTimers):
            state = dict(state)
            timers = state.pop("timers")
        data = None if state is None else _dumps(state, operator, "operator state", sharing)
        snapshot = OperatorSnapshot(ctx.uid, type(operator.transformation).__name__, ctx.subtask_index,
                                    ctx.parallelism, ctx.max_parallelism, keyed, key_groups, data, ctx.name,
                                    segments=sharing.take_used() if sharing is not None else {}, timers=timers)
        backlog = operator.snapshot_backlog()
        if backlog is not None:
            snapshot.backlog, snapshot.backlog_files = encode_backlog(backlog, operator)
        snapshot.taken_ms = (time.perf_counter() - started) * 1000
        result.append(snapshot)
    return result


def release_task(task: Any) -> list[Any]:
    """The checkpoint that froze ``task``'s keyed state is written or given up: let the state go on.
    The keyed backends, whose changes are then folded back bit by bit (``merge_some``)."""
    backends = [operator.ctx.keyed_backend for operator in task.operators if operator.ctx.keyed_backend is not None]
    for backend in backends:
        backend.release()
    return backends


def job_fingerprint(graph: Any) -> str:
    """A digest of the job's operators (uids and kinds), the same for the same program in every
    process and at every parallelism; a checkpoint of another job does not match it."""
    items = sorted((node.uid, type(node.transformation).__name__)
                   for vertex in graph.vertices for node in vertex.nodes)
    return hashlib.sha256(json.dumps(items).encode("utf-8")).hexdigest()


def build_manifest_and_files(manifest: Manifest, snapshots: list[OperatorSnapshot]
                             ) -> tuple[dict[str, bytes | memoryview], dict[str, memoryview]]:
    """Fill ``manifest.operators`` and ``manifest.shared`` from the snapshots; the checkpoint's own
    files to write and the new shared files, by name (the keyed state serialised now: in the
    checkpoint writer, off the tasks' turns)."""
    files: dict[str, bytes | memoryview] = {}
    shared: dict[str, memoryview] = {}
    numbers = {uid: n for n, uid in enumerate(sorted({s.uid for s in snapshots}))}
    for snap in sorted(snapshots, key=lambda s: (numbers[s.uid], s.subtask_index)):
        entry = manifest.operators.get(snap.uid)
        if entry is None:
            entry = manifest.operators[snap.uid] = OperatorEntry(
                snap.uid, snap.kind, snap.parallelism, snap.max_parallelism,
                [SubtaskFiles() for _ in range(snap.parallelism)])
        files_of = entry.subtasks[snap.subtask_index]
        base = f"op{numbers[snap.uid]}-{snap.subtask_index}"
        if snap.keyed is not None or snap.keyed_contents is not None:
            files_of.key_groups = snap.key_groups
            if snap.keyed_contents is None:
                snap.keyed_files, contents = encode_keyed(snap)
            else:
                contents = {name: memoryview(data) for name, data in snap.keyed_contents.items()}
            assert snap.keyed_files is not None  # encoded here or where the state lives
            files_of.keyed_states, files_of.keyed_deltas = snap.keyed_files.base, snap.keyed_files.deltas
            manifest.shared.update(snap.keyed_files.shared)
            shared.update(contents)
        if snap.state is not None:
            files_of.operator = f"{base}.state.pkl"
            files[files_of.operator] = snap.state
        if snap.timers is not None:
            files_of.timers = f"{base}.timers.pkl"
            files[files_of.timers] = _timers_file(snap)
        if snap.backlog is not None:
            files_of.backlog = f"{base}.backlog.pkl"
            files[files_of.backlog] = snap.backlog
            files_of.backlog_files = [_add_shared(file, manifest, shared) for file in snap.backlog_files]
        for digest, (segment, data) in snap.segments.items():
            manifest.shared[segment_name(digest)] = {"sha256": digest, "size": segment.size}
            if data is not None:
                shared[segment_name(digest)] = data
    return files, shared


def _timers_file(snap: OperatorSnapshot) -> bytes:
    """``snap``'s timers pickled (read now, from what the barrier froze), as operator state is."""
    try:
        return pickle.dumps(snap.timers, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - any pickling failure names the operator
        raise CheckpointError(f"operator '{snap.name}' (uid '{snap.uid}'), subtask {snap.subtask_index + 1}: "
                              f"its timers cannot be written to a checkpoint: {type(exc).__name__}: {exc}") from exc


def _add_shared(file: CheckpointFile, manifest: Manifest, shared: dict[str, memoryview]) -> str:
    """List ``file`` as a shared file of ``manifest`` (its contents go to ``shared``, written only
    when the storage does not hold that file yet); its name."""
    contents = file.contents()
    name = f"{SHARED_DIR}/{file.digest()}.{file.extension}"
    manifest.shared[name] = {"sha256": file.digest(), "size": len(contents)}
    shared[name] = contents
    return name


def commit_keyed(snapshots: list[OperatorSnapshot]) -> None:
    """The checkpoint of ``snapshots`` is durable: its keyed files become the base of each
    backend's next checkpoint (taken over when the backend is released), and its segments are
    stored (later checkpoints refer to them without writing them)."""
    for snap in snapshots:
        if snap.keyed is not None:
            snap.keyed.completed = snap.keyed_files
        for segment, _ in snap.segments.values():
            segment.stored()


def loads_checkpointed(data: bytes, files: dict[str, bytes], checkpoint: str) -> Any:
    """Unpickle operator state of the verified checkpoint ``checkpoint``, its references to replay
    cache segments read from its ``files`` (decoded once per checkpoint when ``files`` is a
    ``CheckpointFiles``)."""
    def fetch(digest: str) -> bytes:
        name = segment_name(digest)
        if name not in files:
            raise CorruptCheckpointError("operator state refers to a shared segment the manifest does not list",
                                         checkpoint=checkpoint, file=name)
        return files[name]

    return SegmentReader(fetch, getattr(files, "segments", None)).loads(data)


def keyed_layers(subtask: SubtaskFiles, files: dict[str, bytes], checkpoint: str) -> list[dict[str, Any]]:
    """A subtask's keyed state in a checkpoint as a backend restores it, layer by layer in order:
    every entry, then the layers of changes (either backend's files; each state's file decoded)."""
    if subtask.keyed is not None:  # format version 1
        return [loads_checkpointed(files[subtask.keyed], files, checkpoint)]
    return [{f["state"]: decode_state_file(f["format"], files[f["file"]]) for f in layer}
            for layer in [subtask.keyed_states, *subtask.keyed_deltas]]


def restore_tasks(tasks: list[Any], manifest: Manifest, files: dict[str, bytes], checkpoint: str,
                  stored: Mapping[str, StoredContents] | None = None) -> None:
    """Put the state of a verified checkpoint into freshly built (not yet opened) tasks.

    An operator at the parallelism it was checkpointed at gets its own subtask's files. At
    another parallelism, each new subtask loads the keyed state of the key groups it now owns
    from every old subtask whose range overlaps, and its operator state through
    ``initialize_rescaled_state`` (timers are split by key, sources redistribute what their old
    readers had left, a file sink commits the old subtasks' pending files). A buffered backlog's
    files come from ``stored`` (read when the operator restores them), or else from ``files``.
    """
    stored = stored or {}
    def load(name: str) -> Any:
        return loads_checkpointed(files[name], files, checkpoint)

    def operator_state(subtask: SubtaskFiles) -> Any:
        """A subtask's operator state, its timers (a file of their own) back under ``"timers"``."""
        state = None if subtask.operator is None else load(subtask.operator)
        if subtask.timers is not None:
            state = {**(state or {}), "timers": load(subtask.timers)}
        return state

    def has_keyed(subtask: SubtaskFiles) -> bool:
        return subtask.keyed is not None or bool(subtask.keyed_states)

    for task in tasks:
        for operator in task.operators:
            ctx = operator.ctx
            entry = manifest.operators.get(ctx.uid)
            if entry is None:
                raise CorruptCheckpointError(f"the checkpoint has no state for operator '{ctx.name}'",
                                             checkpoint=checkpoint, expected=f"uid '{ctx.uid}'",
                                             actual=f"uids {sorted(manifest.operators)}")
            backend = ctx.keyed_backend
            if backend is not None and entry.max_parallelism != ctx.max_parallelism:
                raise CheckpointError(
                    f"operator '{ctx.name}' (uid '{ctx.uid}') was checkpointed with max parallelism "
                    f"{entry.max_parallelism} (its number of key groups) but now has {ctx.max_parallelism}; "
                    "keyed state can only be restored with the same max parallelism")
            if entry.parallelism == ctx.parallelism:
                own = entry.subtasks[ctx.subtask_index]
                if has_keyed(own) and backend is not None:
                    for layer in keyed_layers(own, files, checkpoint):
                        backend.restore(layer)
                if own.operator is not None or own.timers is not None:
                    operator.initialize_state(operator_state(own))
                if own.backlog is not None:
                    operator.restore_backlog(decode_backlog(
                        files[own.backlog], [stored.get(name) or files[name] for name in own.backlog_files]))
                continue
            _refuse_rescaled_backlog(operator, entry)
            groups = key_group_range(ctx.max_parallelism, ctx.parallelism, ctx.subtask_index)
            if backend is not None:
                for old in entry.subtasks:
                    if has_keyed(old) and old.key_groups is not None \
                            and old.key_groups[0] < groups.stop and groups.start < old.key_groups[1]:
                        for layer in keyed_layers(old, files, checkpoint):
                            backend.restore(layer, key_groups=groups)
            max_parallelism = ctx.max_parallelism

            def owns_key(key: Any, _groups: range = groups, _max: int = max_parallelism) -> bool:
                return assign_to_key_group(key, _max) in _groups

            operator.initialize_rescaled_state(
                [operator_state(old) for old in entry.subtasks], owns_key)


def _refuse_rescaled_backlog(operator: Any, entry: OperatorEntry) -> None:
    """A checkpoint taken while ``operator`` buffered its backlog is restored at its parallelism only."""
    if any(old.backlog is not None for old in entry.subtasks):
        ctx = operator.ctx
        raise CheckpointError(
            f"operator '{ctx.name}' (uid '{ctx.uid}') was checkpointed while it sorted its backlog, at "
            f"parallelism {entry.parallelism}; the job now has {ctx.parallelism}. A checkpoint taken during "
            "the backlog can only be restored at the parallelism it was taken at (the buffered records are "
            "held by key in each subtask's arrival order, not by key group): restore it with "
            f"set_parallelism({entry.parallelism}), or rescale from a checkpoint taken after the backlog")


def check_restore(tasks: list[Any]) -> None:
    """Step one of applying a restore (state loaded, nothing opened): every operator of the job
    may refuse the state it was given. Only when all accept do the tasks open, which is where
    operators act on their state (a file sink commits and deletes part files), so a refused
    restore — a sink whose output went past the checkpoint, a source whose input is gone —
    leaves every file as it was."""
    for task in tasks:
        for operator in task.operators:
            operator.check_restore()
