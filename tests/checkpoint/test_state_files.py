"""Keyed state files: Arrow IPC when keys and values are primitives, or lists, maps or tuples of
primitives (value, list, map, reducing and aggregating state); pickle per state otherwise (objects,
nested or mixed-type containers, window entries). Exact round trips of every type, restore at
another parallelism, and both formats verified against the manifest before anything is read."""

from __future__ import annotations

import collections
import decimal
import gc
import json
import os
import pickle
import shutil

import pyarrow as pa
import pytest
from crash_job import KEYS, Hook, build, oracle
from test_kill_recovery import committed_output
from test_rescale import FailAfterCheckpoints

from slipstream.datastream import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from slipstream.datastream.functions import AggregateFunction
from slipstream.datastream.typeinfo import Row, RowKind
from slipstream.errors import CorruptCheckpointError, UserFunctionError
from slipstream.runtime.checkpoint import state_files
from slipstream.runtime.checkpoint.state_files import (
    ARROW,
    LEGACY_PICKLE,
    PICKLE,
    decode_state_file,
    encode_keyed_state,
)
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend


def typed(value):
    """``value`` with the type of every part spelled out, so 1 == 1.0 == True and [1] == (1,) do not
    hide a changed type, and NaN and -0.0 compare by their repr."""
    if isinstance(value, dict):
        return type(value).__name__, [(typed(k), typed(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [typed(item) for item in value]
    if isinstance(value, float):
        return "float", repr(value)
    return type(value).__name__, value


def round_trips(entries, kind):
    [(name, got_kind, data)] = encode_keyed_state({"s": entries})
    assert (name, got_kind) == ("s", kind)
    back = decode_state_file(got_kind, data)
    assert typed(back) == typed(entries)
    return data


def flip_middle_byte(path: str, mask: int) -> None:
    """Damage a file in place: its middle byte XOR ``mask``."""
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= mask
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def forbid_reading_state(monkeypatch) -> None:
    """Make any read of checkpointed state (Arrow IPC or pickle) fail the test."""
    from slipstream.operators.segments import SegmentReader

    def refuse(*args, **kwargs):
        raise AssertionError("a state file was read before the checkpoint was verified")
    monkeypatch.setattr(state_files.pa.ipc, "open_file", refuse)
    monkeypatch.setattr(state_files.pickle, "loads", refuse)
    monkeypatch.setattr(SegmentReader, "loads", refuse)  # operator state


@pytest.mark.parametrize("entries", [
    {0: [(1, 10), (2, -3)], 5: [(7, 1 << 62)]},
    {1: [("a", 1.5), ("b", float("inf")), ("c", -0.0)]},
    {2: [(b"k", b"\x00v"), (b"l", None)]},
    {3: [(True, "x"), (False, None)]},
    {3: [(1, True), (2, False)]},                         # bools stay bools
    {3: [(1, None)]},                                     # a column of nothing but None
    {},
])
def test_primitive_state_is_written_as_arrow_and_round_trips(entries):
    data = round_trips(entries, ARROW)
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()  # plain Arrow: any Arrow reader opens it
    assert table.column_names == ["key_group", "key", "value"]


@pytest.mark.parametrize("entries, value_type", [
    # list state: one list<...> column
    ({0: [(1, [1, 2, -(1 << 63)]), (2, [7])], 9: [(3, [4])]}, pa.list_(pa.int64())),
    ({0: [("a", [1.0, 2.5, float("nan"), -0.0])]}, pa.list_(pa.float64())),
    ({0: [("a", [True, False]), ("b", [False])]}, pa.list_(pa.bool_())),
    ({0: [("a", ["x", None, "z"]), ("b", [])]}, pa.list_(pa.string())),
    ({0: [("a", [None, None])]}, pa.list_(pa.null())),
    ({0: [(1, [b"\x00", b""])]}, pa.list_(pa.binary())),
    # map state: one map<..., ...> column, read back as dicts in insertion order
    ({0: [(1, {"b": 2, "a": 1}), (2, {"c": None})], 3: [(4, {"d": 0})]}, pa.map_(pa.string(), pa.int64())),
    ({0: [(1, {1: 1.5, 2: -0.0}), (2, {})]}, pa.map_(pa.int64(), pa.float64())),
    ({0: [("k", {True: "yes", False: "no"})]}, pa.map_(pa.bool_(), pa.string())),
    ({0: [("k", {b"x": True})]}, pa.map_(pa.binary(), pa.bool_())),
    ({0: [("k", {})]}, pa.map_(pa.int64(), pa.null())),
    # reducing / aggregating state of plain values and tuple accumulators: primitives or struct<0, 1, ...>
    ({0: [(1, 6), (2, 1)]}, pa.int64()),
    ({0: [(1, (1, 5)), (2, (2, 9))]}, pa.struct([("0", pa.int64()), ("1", pa.int64())])),
    ({0: [("a", (2.5, 2, None)), ("b", (0.0, 0, "x"))]},
     pa.struct([("0", pa.float64()), ("1", pa.int64()), ("2", pa.string())])),
    ({0: [("a", (True,)), ("b", None)]}, pa.struct([("0", pa.bool_())])),
])
def test_list_map_and_tuple_state_of_primitives_is_arrow_and_round_trips_exactly(entries, value_type):
    data = round_trips(entries, ARROW)
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    assert table.schema.field("value").type == value_type


def test_tuple_keys_are_a_struct_column():
    data = round_trips({0: [((1, "a"), [1]), ((2, None), [2])]}, ARROW)
    assert pa.ipc.open_file(pa.BufferReader(data)).schema.field("key").type == pa.struct(
        [("0", pa.int64()), ("1", pa.string())])


Point = collections.namedtuple("Point", "x y")


class Tagged(list):
    pass


@pytest.mark.parametrize("entries", [
    {0: [(1, 1), ("a", 2)]},            # keys of two types
    {0: [(1, 1), (2, 2.5)]},            # int and float values: Arrow would turn 1 into 1.0
    {0: [(1, True), (2, 3)]},           # bool is not int
    {0: [(1, 1 << 70)]},                # beyond 64 bits
    {0: [(None, 5)]},                   # a None key
    {0: [(1, "\udc80")]},               # a lone surrogate: not UTF-8, so not an Arrow string
    {0: [(1, [1, "a"])]},               # a list of mixed types
    {0: [(1, [1, 2.5])]},               # ints and floats in lists: Arrow would make them all floats
    {0: [(1, [True, 1])]},              # bools and ints in a list
    {0: [(1, [1]), (2, ["a"])]},        # lists of different element types in one state
    {0: [(1, [1 << 64])]},              # a list element beyond 64 bits
    {0: [(1, [[1]])]},                  # nested lists
    {0: [(1, [1]), (2, 3)]},            # lists and plain values in one state
    {0: [(1, Tagged([1]))]},            # a list subclass
    {0: [(1, {1: "a", "b": "c"})]},     # map keys of two types
    {0: [(1, {None: 1})]},              # a None map key
    {0: [(1, {"a": 1, "b": 1.5})]},     # map values of two types
    {0: [(1, {"a": [1]})]},             # map values that are lists
    {0: [(1, collections.defaultdict(int, a=1))]},  # a dict subclass
    {0: [(1, (1, 2)), (2, (1, 2, 3))]},  # tuples of different lengths
    {0: [(1, (1, 2)), (2, (1.5, 2))]},   # int and float at one position
    {0: [(1, ())]},                     # an empty tuple: Arrow has no empty struct to hold it
    {0: [(1, ((1, 2), 3))]},            # nested tuples
    {0: [(1, Point(1, 2))]},            # a namedtuple (tuple subclass)
    {0: [(Point(1, 2), 1)]},            # a namedtuple key
    {0: [(1, {1, 2})]},                 # a set
    {0: [(1, decimal.Decimal("1.5"))]},  # any other object
    {0: [(1, [decimal.Decimal("1.5")])]},  # a list of other objects
])
def test_other_state_falls_back_to_pickle_per_state_and_round_trips(entries):
    parts = encode_keyed_state({"odd": entries, "plain": {0: [(1, 2)]}})
    assert [(name, kind) for name, kind, _ in parts] == [("odd", PICKLE), ("plain", ARROW)]
    assert typed(decode_state_file(PICKLE, parts[0][2])) == typed(entries)
    assert decode_state_file(PICKLE, parts[0][2]) == entries


def test_pickled_state_is_one_pickle_per_chunk_and_old_single_pickles_still_read():
    entries = {group: [(group * 1000 + i, {i, group}) for i in range(500)] for group in range(0, 128, 7)}
    [(_, kind, data)] = encode_keyed_state({"sets": entries})
    assert kind == PICKLE
    assert decode_state_file(PICKLE, data) == entries
    first = int.from_bytes(data[:8], "little")  # a pickle per chunk of entries, behind its length
    groups, keys, values = pickle.loads(data[8:8 + first])
    assert len(keys) == state_files.CHUNK_ROWS and (groups[0], keys[0], values[0]) == (0, 0, {0})
    assert decode_state_file(LEGACY_PICKLE, pickle.dumps(entries)) == entries


def test_arrow_state_of_many_rows_is_written_in_chunks_and_round_trips():
    entries = {group: [(group * 10_000 + i, float(i)) for i in range(400)] for group in range(128)}
    data = round_trips(entries, ARROW)
    reader = pa.ipc.open_file(pa.BufferReader(data))
    assert reader.num_record_batches == -(-len(entries) * 400 // state_files.CHUNK_ROWS) > 1


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0.0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


class Collect(AggregateFunction):
    """An accumulator that is a user object: pickled."""

    def create_accumulator(self):
        return collections.Counter()

    def add(self, value, accumulator):
        accumulator[value] += 1
        return accumulator

    def get_result(self, accumulator):
        return dict(accumulator)


def filled_backend() -> tuple[HeapKeyedStateBackend, dict[str, str]]:
    """A heap backend with every kind of state for 40 keys, and the format each state should get."""
    backend = HeapKeyedStateBackend(max_parallelism=16)
    value = backend.get_state(ValueStateDescriptor("value"))
    flags = backend.get_state(ValueStateDescriptor("flags"))
    recent = backend.get_state(ListStateDescriptor("recent"))
    by_name = backend.get_state(MapStateDescriptor("by-name"))
    total = backend.get_state(ReducingStateDescriptor("total", lambda a, b: a + b))
    pairs = backend.get_state(ReducingStateDescriptor("pairs", lambda a, b: (a[0], a[1] + b[1])))
    average = backend.get_state(AggregatingStateDescriptor("average", Average()))
    collected = backend.get_state(AggregatingStateDescriptor("collected", Collect()))
    window = backend.get_state(ListStateDescriptor("window-contents"), namespaced=True)
    for key in range(40):
        backend.set_current_key(key)
        value.update(key * 1.5)
        flags.update(key % 2 == 0)
        recent.add_all([key, key + 1, None][: 1 + key % 3])
        by_name.put_all({f"n{key}": key, "none": None})
        total.add(key)
        total.add(1)
        pairs.add((f"k{key}", 1))
        pairs.add((f"k{key}", 2))
        average.add(key)
        average.add(2)
        collected.add("x")
        window.set_current_namespace((key * 100, key * 100 + 100))
        window.add(key)
    return backend, {"value": ARROW, "flags": ARROW, "recent": ARROW, "by-name": ARROW, "total": ARROW,
                     "pairs": ARROW, "average": ARROW, "collected": PICKLE, "window-contents": PICKLE}


def test_every_state_kind_of_a_backend_gets_its_format_and_restores_at_another_parallelism():
    """List, map, reducing and aggregating state of primitives are Arrow; an accumulator that is an
    object and namespaced (window) entries stay pickled. Split by the key_group column over three
    new subtasks, every entry comes back exactly once, with its types."""
    backend, expected = filled_backend()
    parts = encode_keyed_state(backend.snapshot())
    assert {name: kind for name, kind, _ in parts} == expected
    restored = {name: decode_state_file(kind, data) for name, kind, data in parts}
    tables = {}
    for subtask in range(3):
        new = HeapKeyedStateBackend(max_parallelism=16)
        groups = key_group_range(16, 3, subtask)
        new.restore(restored, key_groups=groups)
        for name, table in new._tables.items():
            assert {assign_to_key_group(k[0] if name == "window-contents" else k, 16) for k in table} <= set(groups)
            assert not tables.keys() & {(name, k) for k in table}
            tables.update(((name, k), v) for k, v in table.items())
    original = {(name, k): v for name, table in backend._tables.items() for k, v in table.items()}
    assert typed(sorted(tables.items(), key=repr)) == typed(sorted(original.items(), key=repr))
    assert {type(k).__name__ for name, k in tables if name == "window-contents"} == {"_NamespacedKey"}
    restored_backend = HeapKeyedStateBackend(max_parallelism=16)
    restored_backend.restore(restored)
    restored_backend.set_current_key(7)
    assert restored_backend.get_state(AggregatingStateDescriptor("average", Average())).get() == 4.5
    assert restored_backend.get_state(MapStateDescriptor("by-name")).items() == [("n7", 7), ("none", None)]


def run_union(root: str, restore: str | None = None) -> None:
    build("union", os.path.join(root, "out"), os.path.join(root, "chk"), 6_000, interval_ms=None,
          records=500).execute("union", restore_from=restore)


@pytest.fixture(scope="module")
def union_job(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("union"))
    run_union(root)
    return root


def arrow_files(checkpoint: str) -> list[str]:
    """The keyed state files a checkpoint lists (shared, beside it), by name in its manifest."""
    storage = os.path.dirname(checkpoint)
    return sorted(name for name in json.load(open(os.path.join(checkpoint, "_manifest.json")))["shared"]
                  if name.endswith(".arrow") and os.path.exists(os.path.join(storage, name)))


def folded(checkpoint: str, files: list[list[str]]) -> dict:
    """``key -> value`` of a state from its Arrow files, layer after layer (None: removed)."""
    state: dict = {}
    for layer in files:
        for name in layer:
            table = pa.ipc.open_file(os.path.join(os.path.dirname(checkpoint), name)).read_all()
            for key, value in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
                state[key] = value
    return {key: value for key, value in state.items() if value is not None}


def test_a_jobs_value_state_is_checkpointed_as_arrow(union_job):
    storage = CheckpointStorage(os.path.join(union_job, "chk"))
    latest = storage.path_of(storage.complete_ids()[-1])
    names = arrow_files(latest)
    assert names, os.listdir(latest)  # the KeyedProcessFunction's ValueState[int] of int keys
    manifest = storage.read_verified(latest, None).manifest
    subtasks = [s for entry in manifest.operators.values() for s in entry.subtasks]
    listed = [f for s in subtasks for layer in [s.keyed_states, *s.keyed_deltas] for f in layer]
    assert {f["file"] for f in listed if f["format"] == "arrow"} == set(names)
    assert {f["state"] for f in listed if f["format"] == "arrow"} == {"count"}
    counts = {}
    for s in subtasks:
        counts.update(folded(latest, [[f["file"] for f in layer] for layer in [s.keyed_states, *s.keyed_deltas]]))
    assert sorted(counts) == list(range(13))


@pytest.mark.one_process("its failure comes at a count its function's list keeps, which a restarted worker has anew")
def test_arrow_state_restores_after_a_failure(tmp_path):
    """The job's counts come back from the Arrow files: a lost or doubled count breaks the oracle."""
    from slipstream.datastream import RestartStrategies

    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    seen = []

    def fail(value):
        seen.append(value)
        if len(seen) == 4_000:
            raise RuntimeError("injected")
    env = build("union", out, chk, 6_000, interval_ms=None, records=500,
                restart=RestartStrategies.fixed_delay_restart(1, 0), fail=fail)
    result = env.execute("restart")
    assert result.get_accumulator_result("checkpoints")["restarts"] == 1
    assert committed_output(out) == oracle("union", 6_000)


def test_a_damaged_arrow_state_file_is_caught_before_it_is_read(union_job, tmp_path, monkeypatch):
    copy = str(tmp_path / "copy")
    shutil.copytree(union_job, copy)
    storage = CheckpointStorage(os.path.join(copy, "chk"))
    latest = storage.path_of(storage.complete_ids()[-1])
    name = arrow_files(latest)[0]
    flip_middle_byte(os.path.join(os.path.dirname(latest), name), 0xFF)
    forbid_reading_state(monkeypatch)
    with pytest.raises(CorruptCheckpointError) as caught:
        run_union(copy, restore=latest)
    assert caught.value.file == name and "checksum" in str(caught.value)


# -- a running job's ListState and MapState -------------------------------------------------------
N = 6_000


def build_buffers(root: str, parallelism: int = 2, fail=None, restart=None):
    """Numbers 1..N (one source subtask, so each key sees its numbers in order) -> key_by(x % KEYS) ->
    a function keeping the last three numbers of its key in a ListState[int] and a count per residue
    in a MapState[str, int], emitting both: any entry lost, doubled or changed breaks the oracle."""
    from slipstream.datastream import (
        KeyedProcessFunction,
        RestartStrategies,
        StreamExecutionEnvironment,
    )
    from slipstream.datastream.connectors.file_system import FileSink
    from slipstream.datastream.connectors.number_seq import NumberSequenceSource
    from slipstream.datastream.formats.base import Encoder

    class Buffers(KeyedProcessFunction):
        def open(self, runtime_context):
            self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))
            self.by_residue = runtime_context.get_map_state(MapStateDescriptor("by-residue"))

        def process_element(self, x, ctx):
            self.recent.add(x)
            recent = list(self.recent.get())[-3:]
            self.recent.update(recent)
            residue = f"r{x % 3}"
            self.by_residue.put(residue, (self.by_residue.get(residue) or 0) + 1)
            counts = ";".join(f"{k}={v}" for k, v in self.by_residue.items())
            yield f"{ctx.get_current_key()}|{recent}|{counts}"

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.configure(batch_size=50, backlog_sorting=False)
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval_records(400)
    config.set_checkpoint_storage_dir(os.path.join(root, "chk"))
    env.set_restart_strategy(restart or RestartStrategies.no_restart())
    sink = FileSink.for_row_format(os.path.join(root, "out"), Encoder.simple_string_encoder()).build()
    (env.from_source(NumberSequenceSource(1, N), None, "numbers").uid("numbers").set_parallelism(1)
     .map(Hook(fail)).uid("hook").set_parallelism(1)
     .key_by(lambda x: x % KEYS).process(Buffers()).uid("buffers").sink_to(sink).uid("sink"))
    return env


def buffers_oracle() -> collections.Counter:
    recent: dict[int, list[int]] = collections.defaultdict(list)
    counts: dict[int, dict[str, int]] = collections.defaultdict(dict)
    lines = []
    for x in range(1, N + 1):
        key = x % KEYS
        recent[key] = (recent[key] + [x])[-3:]
        residue = f"r{x % 3}"
        counts[key][residue] = counts[key].get(residue, 0) + 1
        lines.append(f"{key}|{recent[key]}|{';'.join(f'{k}={v}' for k, v in counts[key].items())}")
    return collections.Counter(lines)


@pytest.fixture(scope="module")
def buffers_job(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("buffers"))
    build_buffers(root).execute("buffers")
    assert committed_output(os.path.join(root, "out")) == buffers_oracle()
    return root


def keyed_files(checkpoint: str) -> dict[str, list[list[list[tuple[str, str]]]]]:
    """``state name -> per subtask, per layer [(file, format), ...]`` from a checkpoint's (verified) manifest."""
    storage = CheckpointStorage(os.path.dirname(checkpoint))
    manifest = storage.read_verified(checkpoint, None).manifest
    result: dict[str, list[list[list[tuple[str, str]]]]] = {}
    for entry in manifest.operators.values():
        for subtask in entry.subtasks:
            for state in {f["state"] for f in subtask.keyed_states}:
                result.setdefault(state, []).append(
                    [[(f["file"], f["format"]) for f in layer if f["state"] == state]
                     for layer in [subtask.keyed_states, *subtask.keyed_deltas]])
    return result


def folded_state(checkpoint: str, subtasks: list[list[list[tuple[str, str]]]]) -> dict:
    state: dict = {}
    for layers in subtasks:
        state.update(folded(checkpoint, [[name for name, _ in layer] for layer in layers]))
    return state


def test_a_jobs_list_and_map_state_is_checkpointed_as_arrow(buffers_job):
    storage = CheckpointStorage(os.path.join(buffers_job, "chk"))
    latest = storage.path_of(storage.complete_ids()[-1])
    files = keyed_files(latest)
    assert set(files) == {"recent", "by-residue"}
    every = [(f, kind) for subtasks in files.values() for layers in subtasks for layer in layers for f, kind in layer]
    assert {kind for _, kind in every} == {ARROW}
    storage_dir = os.path.dirname(latest)
    schema = {state: pa.ipc.open_file(os.path.join(storage_dir, files[state][0][0][0][0])).schema
              for state in files}
    assert schema["recent"].field("value").type == pa.list_(pa.int64())
    assert schema["by-residue"].field("value").type == pa.map_(pa.string(), pa.int64())
    last = folded_state(latest, files["recent"])
    assert sorted(last) == list(range(KEYS))
    assert last[0] == [N - 2 * KEYS - N % KEYS, N - KEYS - N % KEYS, N - N % KEYS]  # the last three of key 0


@pytest.mark.one_process("it records the state files this process decodes (monkeypatched)")
def test_list_and_map_state_restore_from_arrow_after_a_failure(tmp_path, monkeypatch):
    """The restart reads the lists and maps back from Arrow files; a changed, lost or doubled entry
    changes the emitted lines and breaks the oracle."""
    from slipstream.datastream import RestartStrategies
    from slipstream.runtime.checkpoint import snapshot

    decoded = []
    real = snapshot.decode_state_file

    def recording(kind, data):
        entries = real(kind, data)
        decoded.append((kind, pa.ipc.open_file(pa.BufferReader(data)).schema.field("value").type
                        if kind == ARROW else None))
        return entries
    monkeypatch.setattr(snapshot, "decode_state_file", recording)
    seen = []

    def fail(value):
        seen.append(value)
        if len(seen) == 4_000:
            raise RuntimeError("injected")
    root = str(tmp_path)
    result = build_buffers(root, restart=RestartStrategies.fixed_delay_restart(1, 0), fail=fail).execute("restart")
    assert result.get_accumulator_result("checkpoints")["restarts"] == 1
    assert {kind for kind, _ in decoded} == {ARROW}
    assert {value_type for _, value_type in decoded} == {pa.list_(pa.int64()), pa.map_(pa.string(), pa.int64())}
    assert committed_output(os.path.join(root, "out")) == buffers_oracle()


@pytest.mark.one_process("its failure comes at a count of records its function's copy saw once a checkpoint completed, "
                         "timed for one process: on workers the job may end first (it did once in a loaded run)")
@pytest.mark.parametrize("old,new", [(2, 3), (3, 1)])
def test_list_and_map_state_restore_at_another_parallelism(tmp_path, old, new):
    """Killed at one parallelism, restored at another: each new subtask takes the rows of its key groups
    from the old subtasks' Arrow files (the key_group column)."""
    root = str(tmp_path)
    with pytest.raises(UserFunctionError, match="injected failure"):
        build_buffers(root, old, fail=FailAfterCheckpoints(root, N // 2)).execute("before")
    latest = CheckpointStorage(os.path.join(root, "chk")).complete_ids()[-1]
    files = keyed_files(CheckpointStorage(os.path.join(root, "chk")).path_of(latest))
    assert {len(listed) for listed in files.values()} == {old}
    assert {kind for subtasks in files.values() for layers in subtasks for layer in layers
            for _, kind in layer} == {ARROW}
    result = build_buffers(root, new).execute("rescaled", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None
    assert committed_output(os.path.join(root, "out")) == buffers_oracle()


def test_a_flipped_byte_in_a_list_state_file_is_caught_before_any_read(buffers_job, tmp_path, monkeypatch):
    copy = str(tmp_path / "copy")
    shutil.copytree(buffers_job, copy)
    storage = CheckpointStorage(os.path.join(copy, "chk"))
    latest = storage.path_of(storage.complete_ids()[-1])
    name = keyed_files(latest)["recent"][0][0][0][0]
    flip_middle_byte(os.path.join(os.path.dirname(latest), name), 0x01)
    forbid_reading_state(monkeypatch)
    with pytest.raises(CorruptCheckpointError) as caught:
        build_buffers(copy).execute("restore", restore_from=latest)
    assert caught.value.file == name and "checksum" in str(caught.value)


@pytest.mark.parametrize("rows", [
    [Row(user_id=1, segment="retail", limit=1500.0), Row(user_id=2, segment=None, limit=700.0), None],
    [Row(1, "a", True), Row(2, "b", False)],
])
def test_rows_of_primitives_are_arrow_and_come_back_as_equal_rows(rows):
    entries = {3: [(i, row) for i, row in enumerate(rows)]}
    data = round_trips(entries, ARROW)
    back = decode_state_file(ARROW, data)
    assert back == entries and all(type(value) is type(row) for (_, value), row in zip(back[3], rows))
    assert [None if value is None else value._fields for _, value in back[3]] == \
        [None if row is None else row._fields for row in rows]


@pytest.mark.parametrize("rows", [
    [Row(a=1), Row(b=1)],                                    # different field names
    [Row(a=1), Row(1)],                                      # named and positional
    [Row(a=[1])],                                            # a value that is not a primitive
])
def test_rows_that_differ_or_hold_objects_are_pickled(rows):
    entries = {0: [(i, row) for i, row in enumerate(rows)]}
    [(_, kind, data)] = encode_keyed_state({"rows": entries})
    assert kind == PICKLE and decode_state_file(PICKLE, data) == entries


def test_a_row_of_another_kind_is_pickled_with_its_kind():
    row = Row(a=1)
    row.set_row_kind(RowKind.DELETE)
    [(_, kind, data)] = encode_keyed_state({"rows": {0: [(1, row)]}})
    assert kind == PICKLE and decode_state_file(PICKLE, data)[0][0][1].get_row_kind() is RowKind.DELETE


def test_rows_are_encoded_without_an_object_per_row_so_the_writer_starts_no_garbage_collection():
    # each young collection would run in the checkpoint writer's thread, holding the interpreter
    # lock the job waits for; a tuple per row started one every 700 rows
    names = ["user_id", "segment", "limit"]
    rows = []
    for i in range(20_000):
        row = Row(i, "retail", i / 2)
        row._fields = names  # one list, as rows made from a columnar source share
        rows.append(row)
    state = {"profile": {0: list(enumerate(rows)), 1: [(-1, None)]},
             "pair": {2: [(i, (i, 1.5)) for i in range(20_000)]}}
    encode_keyed_state({"warm-up": {0: [(0, rows[0]), (1, None)]}})  # pyarrow's first calls import modules
    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(700, 10, 10)
    try:
        before = gc.get_stats()[0]["collections"]
        parts = encode_keyed_state(state)
        collections = gc.get_stats()[0]["collections"] - before
    finally:
        gc.set_threshold(*thresholds)
    assert [kind for _, kind, _ in parts] == [ARROW, ARROW]
    assert collections <= 2
    assert decode_state_file(ARROW, parts[0][2])[0] == list(enumerate(rows))
