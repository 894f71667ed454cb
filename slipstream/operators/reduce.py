"""``KeyedReduceOperator``: a rolling reduce per key (``reduce``, ``sum``, ``min``, ``max``, ``*_by``).

Emits the key's combined value after every record, as Flink does in streaming.
During backlog it replays record by record; the sorted batch path comes with the
backlog work.
"""

from __future__ import annotations

from typing import Any

from slipstream.datastream.functions import Function, ReduceFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.transformations import ReduceTransformation
from slipstream.errors import SlipstreamError
from slipstream.operators.base import OperatorContext, StreamOperator
from slipstream.operators.elements import RecordBatch

REDUCE_STATE = ValueStateDescriptor("_reduce_accumulator")


class KeyedReduceOperator(StreamOperator):
    transformation_type = ReduceTransformation

    def __init__(self, transformation: ReduceTransformation) -> None:
        super().__init__(transformation)
        self.function: ReduceFunction = transformation.function
        self.key_selector = transformation.key_selectors[0]

    def user_functions(self) -> list[Function]:
        return [self.function]

    def setup(self, ctx: OperatorContext) -> None:
        super().setup(ctx)
        self.accumulators = ctx.keyed_backend.value_table(REDUCE_STATE)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        reduce = self.function.reduce
        key_selector = self.key_selector
        table = self.accumulators
        get = table.get
        out: list = []
        append = out.append
        value: Any = None
        try:
            for value in batch.values:
                key = key_selector(value)
                current = get(key)
                if current is not None:
                    current = reduce(current, value)
                    if current is None:  # stored, None would silently restart the key's fold
                        raise TypeError("the reduce function returned None; it must return the "
                                        "combined value")
                else:
                    current = value
                table[key] = current
                append(current)
        except SlipstreamError:
            raise
        except Exception as exc:
            raise self.user_error(value, exc) from exc
        self.output.collect_batch(RecordBatch(out, batch.timestamps))
