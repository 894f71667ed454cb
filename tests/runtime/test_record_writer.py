"""Record writers: each partitioning routes records as specified; buffers leave in order."""

import pytest

from slipstream.datastream.functions import Partitioner, as_function
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import MapTransformation, Partitioning
from slipstream.errors import UserFunctionError
from slipstream.operators.elements import EndOfInput, RecordBatch
from slipstream.runtime.channels import Channel, SpillingChannel
from slipstream.runtime.job_graph import StreamEdge, StreamNode
from slipstream.runtime.key_groups import subtask_for_key
from slipstream.runtime.record_writer import RecordWriter, target_subtasks


def make_writer(partitioning: Partitioning, upstream: int = 1, downstream: int = 4, subtask: int = 0,
                batch_size: int = 1000, seed: int = 0, key_selector=None, partitioner=None,  # noqa: ANN001
                max_parallelism: int = 128, capacity: int = 1000) -> tuple[RecordWriter, list[Channel]]:
    source = StreamNode(1, MapTransformation(id=1, name="up"), upstream, 128, "up")
    target = StreamNode(2, MapTransformation(id=2, name="down"), downstream, max_parallelism, "down")
    edge = StreamEdge(source, target, 0, partitioning, key_selector=key_selector, partitioner=partitioner)
    targets = target_subtasks(partitioning, subtask, upstream, downstream)
    channels = [Channel(capacity, f"c{j}") for j in targets]
    return RecordWriter(edge, subtask, channels, batch_size, seed), channels


def drain(channel: Channel) -> list:
    """Every element of the channel: record values flattened, events as they are."""
    out: list = []
    while channel.queue:
        element = channel.pop()
        if isinstance(element, RecordBatch):
            out.extend(element.values)
        else:
            out.append(element)
    return out


def routed(writer: RecordWriter, channels: list[Channel], values: list) -> list[list]:
    writer.emit(RecordBatch(list(values)))
    writer.flush()
    return [drain(channel) for channel in channels]


# -- target subtasks --------------------------------------------------------------------------------
@pytest.mark.parametrize(("upstream", "downstream"), [(1, 1), (2, 4), (4, 2), (3, 5), (5, 3), (2, 2), (1, 3)])
def test_rescale_targets_cover_each_downstream_subtask_exactly_once_when_fanning_out(
        upstream: int, downstream: int) -> None:
    targets = [target_subtasks(Partitioning.RESCALE, i, upstream, downstream) for i in range(upstream)]
    assert all(targets), "every upstream subtask has at least one target"
    flat = [j for ts in targets for j in ts]
    assert sorted(set(flat)) == list(range(downstream))
    if downstream >= upstream:
        assert sorted(flat) == list(range(downstream))  # disjoint local groups
        assert all(ts == list(range(ts[0], ts[-1] + 1)) for ts in targets)  # contiguous
    else:
        assert all(len(ts) == 1 for ts in targets)


def test_rescale_targets_for_two_to_four() -> None:
    assert target_subtasks(Partitioning.RESCALE, 0, 2, 4) == [0, 1]
    assert target_subtasks(Partitioning.RESCALE, 1, 2, 4) == [2, 3]
    assert target_subtasks(Partitioning.RESCALE, 3, 4, 2) == [1]


def test_forward_targets_the_same_index_and_others_target_all() -> None:
    assert target_subtasks(Partitioning.FORWARD, 2, 3, 3) == [2]
    for partitioning in (Partitioning.HASH, Partitioning.REBALANCE, Partitioning.BROADCAST,
                         Partitioning.SHUFFLE, Partitioning.GLOBAL, Partitioning.CUSTOM):
        assert target_subtasks(partitioning, 1, 2, 3) == [0, 1, 2]


# -- routing ----------------------------------------------------------------------------------------
def test_hash_sends_equal_keys_to_the_channel_of_their_subtask() -> None:
    writer, channels = make_writer(Partitioning.HASH, downstream=4, key_selector=lambda v: v[0])
    records = [(f"k{i % 37}", i) for i in range(500)]
    outputs = routed(writer, channels, records)
    assert sorted(r for out in outputs for r in out) == sorted(records)
    for index, out in enumerate(outputs):
        for key, _ in out:
            assert subtask_for_key(key, 128, 4) == index
    # arrival order per channel is preserved
    for out in outputs:
        assert [i for _, i in out] == sorted(i for _, i in out)
    assert sum(1 for out in outputs if out) > 1


def test_hash_uses_the_consumers_max_parallelism() -> None:
    writer, channels = make_writer(Partitioning.HASH, downstream=3, key_selector=lambda v: v,
                                   max_parallelism=7)
    outputs = routed(writer, channels, list(range(200)))
    for index, out in enumerate(outputs):
        assert all(subtask_for_key(k, 7, 3) == index for k in out)


def test_hash_routes_more_keys_than_it_remembers_each_to_its_subtask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the keys a writer remembers, numbers are hashed a batch at a time and other keys one by
    one: every batch, whichever path it takes, lands on the subtasks the keys own."""
    monkeypatch.setattr("slipstream.runtime.record_writer._ROUTED_KEYS_KEPT", 64)
    writer, channels = make_writer(Partitioning.HASH, downstream=3, key_selector=lambda v: v)
    batches = [list(range(start, start + 50)) for start in range(0, 500, 50)]
    batches += [[f"k{i}" for i in range(start, start + 50)] for start in range(0, 200, 50)]
    batches += [[1, 1.0, True, 2**70, -1, 0.5] * 10, list(range(500, 550)), list(range(0, 50))]
    for batch in batches:
        outputs = routed(writer, channels, batch)
        assert sorted(map(str, batch)) == sorted(str(k) for out in outputs for k in out)
        for index, out in enumerate(outputs):
            assert all(subtask_for_key(k, 128, 3) == index for k in out)


def test_rebalance_is_round_robin_continuing_across_batches() -> None:
    writer, channels = make_writer(Partitioning.REBALANCE, upstream=2, downstream=3, subtask=1)
    writer.emit(RecordBatch([0, 1, 2, 3]))
    writer.emit(RecordBatch([4, 5]))
    writer.flush()
    # subtask 1 starts at channel 1
    assert [drain(c) for c in channels] == [[2, 5], [0, 3], [1, 4]]


def test_rescale_round_robins_over_its_local_group_only() -> None:
    writer, channels = make_writer(Partitioning.RESCALE, upstream=2, downstream=4, subtask=1)
    assert len(channels) == 2  # subtasks 2 and 3
    assert routed(writer, channels, [0, 1, 2, 3, 4]) == [[1, 3], [0, 2, 4]]


def test_broadcast_sends_every_record_to_every_channel() -> None:
    writer, channels = make_writer(Partitioning.BROADCAST, downstream=3)
    assert routed(writer, channels, [1, 2, 3]) == [[1, 2, 3]] * 3


def test_global_sends_everything_to_subtask_zero() -> None:
    writer, channels = make_writer(Partitioning.GLOBAL, upstream=2, downstream=3, subtask=1)
    assert routed(writer, channels, [1, 2, 3]) == [[1, 2, 3], [], []]


def test_forward_passes_the_batch_through() -> None:
    writer, channels = make_writer(Partitioning.FORWARD, upstream=2, downstream=2, subtask=1)
    batch = RecordBatch([1, 2], [10, 20])
    writer.emit(batch)
    assert channels[0].pop() is batch


def test_shuffle_is_deterministic_for_a_seed_and_spreads() -> None:
    runs = []
    for seed in (3, 3, 4):
        writer, channels = make_writer(Partitioning.SHUFFLE, downstream=4, seed=seed)
        runs.append(routed(writer, channels, list(range(400))))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    for out in runs[0]:
        assert 50 <= len(out) <= 150
        assert out == sorted(out)


def test_shuffle_differs_between_upstream_subtasks_of_one_seed() -> None:
    outputs = []
    for subtask in (0, 1):
        writer, channels = make_writer(Partitioning.SHUFFLE, upstream=2, downstream=4, subtask=subtask)
        outputs.append(routed(writer, channels, list(range(100))))
    assert outputs[0] != outputs[1]


class ModPartitioner(Partitioner):
    def partition(self, key, num_partitions):  # noqa: ANN001, ANN201
        return key % num_partitions


def test_custom_partitioner_chooses_the_channel_from_the_key() -> None:
    writer, channels = make_writer(Partitioning.CUSTOM, downstream=3, key_selector=lambda v: v[1],
                                   partitioner=ModPartitioner())
    records = [("a", 0), ("b", 4), ("c", 5), ("d", 3)]
    assert routed(writer, channels, records) == [[("a", 0), ("d", 3)], [("b", 4)], [("c", 5)]]


def test_custom_partitioner_out_of_range_names_the_record() -> None:
    partitioner = as_function(lambda key, n: n, Partitioner, "partition", 2, "test")
    writer, _ = make_writer(Partitioning.CUSTOM, downstream=3, key_selector=lambda v: v,
                            partitioner=partitioner)
    with pytest.raises(UserFunctionError, match=r"partition_custom before 'down'.*failed on record 7.*"
                                                r"partitioner returned 3, expected an int in \[0, 3\)"):
        writer.emit(RecordBatch([7]))


def test_custom_partitioner_that_raises_is_reported_from_the_cause() -> None:
    partitioner = as_function(lambda key, n: 1 // 0, Partitioner, "partition", 2, "test")
    writer, _ = make_writer(Partitioning.CUSTOM, downstream=2, key_selector=lambda v: v,
                            partitioner=partitioner)
    with pytest.raises(UserFunctionError, match="ZeroDivisionError") as info:
        writer.emit(RecordBatch(["x"]))
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_key_selector_failure_names_the_failing_record() -> None:
    writer, _ = make_writer(Partitioning.HASH, downstream=2, key_selector=lambda v: v["id"])
    with pytest.raises(UserFunctionError, match=r"key_by before 'down'.*key of record \{'name': 'b'\}"):
        writer.emit(RecordBatch([{"id": 1}, {"name": "b"}, {"id": 3}]))


def test_unhashable_key_names_the_record_whose_key_it_is() -> None:
    writer, _ = make_writer(Partitioning.HASH, downstream=2, key_selector=lambda v: v)
    with pytest.raises(UserFunctionError, match=r"key of record \[2\]: TypeError"):
        writer.emit(RecordBatch([1, [2], 3]))


# -- batching, timestamps and events ----------------------------------------------------------------
def test_records_wait_in_buffers_until_a_batch_is_full() -> None:
    writer, channels = make_writer(Partitioning.REBALANCE, downstream=2, batch_size=3)
    writer.emit(RecordBatch([0, 1, 2, 3]))  # channel 0 gets 0, 2; channel 1 gets 1, 3
    assert [len(c) for c in channels] == [0, 0]
    writer.emit(RecordBatch([4, 5]))  # now 3 records each
    assert [[b.values for b in c.queue] for c in channels] == [[[0, 2, 4]], [[1, 3, 5]]]
    writer.emit(RecordBatch([6]))
    assert [len(c) for c in channels] == [1, 1]
    writer.flush()
    assert [b.values for b in channels[0].queue] == [[0, 2, 4], [6]]
    writer.flush()  # nothing buffered: no empty batch
    assert [len(c) for c in channels] == [2, 1]


def test_timestamps_stay_with_their_records() -> None:
    writer, channels = make_writer(Partitioning.HASH, downstream=3, key_selector=lambda v: v)
    values = list(range(60))
    writer.emit(RecordBatch(values[:30], [v * 10 for v in values[:30]]))
    writer.emit(RecordBatch(values[30:45]))  # no timestamps
    writer.emit(RecordBatch(values[45:], [v * 10 for v in values[45:]]))
    writer.flush()
    for channel in channels:
        while channel.queue:
            batch = channel.pop()
            assert batch.timestamps is not None and len(batch.timestamps) == len(batch.values)
            for value, timestamp in zip(batch.values, batch.timestamps):
                assert timestamp == (None if 30 <= value < 45 else value * 10)


def test_batches_without_timestamps_stay_without() -> None:
    writer, channels = make_writer(Partitioning.REBALANCE, downstream=2)
    writer.emit(RecordBatch([1, 2, 3]))
    writer.flush()
    assert all(c.pop().timestamps is None for c in channels)


def test_events_follow_the_records_buffered_before_them() -> None:
    writer, channels = make_writer(Partitioning.REBALANCE, downstream=2, batch_size=100)
    writer.emit(RecordBatch([1, 2, 3]))
    watermark = Watermark(5)
    writer.broadcast_event(watermark)
    writer.emit(RecordBatch([4]))
    writer.broadcast_event(EndOfInput())
    assert drain(channels[0]) == [1, 3, watermark, EndOfInput()]
    assert drain(channels[1]) == [2, watermark, 4, EndOfInput()]


def test_capacity_is_reported_per_channel() -> None:
    writer, channels = make_writer(Partitioning.BROADCAST, downstream=2, capacity=2)
    assert writer.has_capacity()
    writer.emit(RecordBatch([1]))
    assert writer.has_capacity()
    writer.emit(RecordBatch([2]))
    assert not writer.has_capacity()
    channels[1].pop()
    assert not writer.has_capacity()  # channel 0 is still full
    channels[0].pop()
    assert writer.has_capacity()


def test_a_spilling_channel_never_stops_its_writer() -> None:
    writer, _ = make_writer(Partitioning.FORWARD, upstream=1, downstream=1)
    channel = SpillingChannel(memory_budget=2)
    writer.channels = [channel]
    try:
        for i in range(10):
            assert writer.has_capacity()
            writer.emit(RecordBatch([i]))
    finally:
        channel.close()


@pytest.mark.parametrize("partitioning", [Partitioning.FORWARD, Partitioning.BROADCAST])
@pytest.mark.parametrize("columnar", [False, True])
def test_a_batch_larger_than_the_batch_size_leaves_in_pieces_of_it(partitioning, columnar) -> None:
    """A channel element is one step of its consumer: none is larger than a batch, so a big result
    (a vectorised co_group's) cannot hold the consuming task while its other inputs wait."""
    import pyarrow as pa

    downstream = 1 if partitioning is Partitioning.FORWARD else 2
    writer, channels = make_writer(partitioning, downstream=downstream, batch_size=1024)
    values, stamps = list(range(5000)), [10 * i for i in range(5000)]
    batch = RecordBatch(None, stamps, arrow=pa.record_batch({"x": values})) if columnar else RecordBatch(values, stamps)
    writer.emit(batch)
    for channel in channels:
        pieces = list(channel.queue)
        assert [len(piece) for piece in pieces] == [1024, 1024, 1024, 1024, 904]
        assert [row[0] if columnar else row for piece in pieces for row in piece.values] == values
        assert [t for piece in pieces for t in piece.timestamps] == stamps
        assert all(piece.is_columnar == columnar for piece in pieces)


@pytest.mark.parametrize("partitioning", [Partitioning.FORWARD, Partitioning.BROADCAST])
def test_an_arrow_batch_of_a_producer_in_backlog_leaves_in_larger_pieces_and_rows_do_not(partitioning) -> None:
    """While its producer is backlog an Arrow batch crosses in pieces of COLUMNAR_BACKLOG_FACTOR
    batches (what a columnar consumer does per piece is paid 64 times less); Python rows, and Arrow
    once the backlog has ended, still leave in pieces of the batch size."""
    import pyarrow as pa

    from slipstream.runtime.record_writer import COLUMNAR_BACKLOG_FACTOR

    downstream = 1 if partitioning is Partitioning.FORWARD else 2
    writer, channels = make_writer(partitioning, downstream=downstream, batch_size=8)
    backlog = [True]
    writer.producer_in_backlog = lambda: backlog[0]
    size = 8 * COLUMNAR_BACKLOG_FACTOR
    values = list(range(2 * size + 5))
    writer.emit(RecordBatch(None, None, arrow=pa.record_batch({"x": values})))
    writer.emit(RecordBatch(values[:20]))
    backlog[0] = False
    writer.emit(RecordBatch(None, None, arrow=pa.record_batch({"x": values[:20]})))
    for channel in channels:
        pieces = list(channel.queue)
        assert [(len(piece), piece.is_columnar) for piece in pieces] == [
            (size, True), (size, True), (5, True), (8, False), (8, False), (4, False), (8, True), (8, True), (4, True)]
        assert [row[0] for piece in pieces[:3] for row in piece.values] == values
