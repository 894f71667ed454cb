"""Record-at-a-time operators: map, flat_map and filter.

Each runs its function over a whole batch in one loop. On a keyed stream the
record's key is made current first, so the function may use keyed state. During
backlog they replay record by record; the vectorised batch path comes with the
backlog work.
"""

from __future__ import annotations

from typing import Any, cast

from slipstream.datastream.functions import Function
from slipstream.datastream.transformations import FilterTransformation, FlatMapTransformation, MapTransformation
from slipstream.errors import user_code
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import KeyedStateBackend, StreamOperator
from slipstream.operators.elements import RecordBatch

NO_FLAT_MAP_RESULT = ("a flat_map function must return or yield its outputs (an iterable: [] for none), got None: "
                      "a missing return?")
"""Why a flat_map function that returned None fails (as PyFlink's, iterating it): its output would be lost silently."""


def flat_map_results(results: Any) -> Any:
    """``results`` of a flat_map function, refused when None (see :data:`NO_FLAT_MAP_RESULT`)."""
    if results is None:
        raise TypeError(NO_FLAT_MAP_RESULT)
    return results


class _RecordFunctionOperator(StreamOperator):
    """Base of map/flat_map/filter: one user function, optional key."""

    method_name = ""
    backlog = streamed("its function is called once per record either way, with no key to group the calls by")

    def __init__(self, transformation: Any) -> None:
        super().__init__(transformation)
        self.function: Function = transformation.function
        self.method = getattr(self.function, self.method_name)
        self.key_selector = transformation.key_selectors[0] if transformation.is_keyed else None

    def user_functions(self) -> list[Function]:
        return [self.function]


class MapOperator(_RecordFunctionOperator):
    transformation_type = MapTransformation
    emits_declared_type = True
    method_name = "map"

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        method = self.method
        out: list[Any] = []
        append = out.append
        value = None
        with user_code(self, lambda: value):
            if self.key_selector is None:
                for value in batch.values:
                    append(method(value))
            else:
                key_selector, backend = self.key_selector, self.keyed_backend()
                for value in batch.values:
                    backend.set_current_key(key_selector(value))
                    append(method(value))
        self.output.collect_batch(RecordBatch(out, batch.timestamps))


class FlatMapOperator(_RecordFunctionOperator):
    transformation_type = FlatMapTransformation
    emits_declared_type = True
    method_name = "flat_map"

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        method = self.method
        out: list[Any] = []
        extend = out.extend
        timestamps_in = batch.timestamps
        timestamps_out: list[Any] | None = None if timestamps_in is None else []
        stamps_in = cast(list[Any], timestamps_in)  # read only when timestamps_out is a list
        key_selector, backend = self.key_selector, cast(KeyedStateBackend, self.ctx.keyed_backend)  # set when keyed
        value = None
        with user_code(self, lambda: value):
            for index, value in enumerate(batch.values):
                if key_selector is not None:
                    backend.set_current_key(key_selector(value))
                before = len(out)
                results = method(value)
                if results is None:
                    raise TypeError(NO_FLAT_MAP_RESULT)
                extend(results)
                if timestamps_out is not None:
                    timestamps_out.extend([stamps_in[index]] * (len(out) - before))
        if out:
            self.output.collect_batch(RecordBatch(out, timestamps_out))


class FilterOperator(_RecordFunctionOperator):
    transformation_type = FilterTransformation
    method_name = "filter"

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        method = self.method
        key_selector, backend = self.key_selector, cast(KeyedStateBackend, self.ctx.keyed_backend)  # set when keyed
        keep: list[bool] = []
        append = keep.append
        value = None
        with user_code(self, lambda: value):
            for value in batch.values:
                if key_selector is not None:
                    backend.set_current_key(key_selector(value))
                append(bool(method(value)))
        values = [v for v, k in zip(batch.values, keep) if k]
        if not values:
            return
        timestamps = None if batch.timestamps is None else [t for t, k in zip(batch.timestamps, keep) if k]
        self.output.collect_batch(RecordBatch(values, timestamps))
