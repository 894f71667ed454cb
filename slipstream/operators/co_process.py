"""``CoProcessOperator``: two inputs through one function (``CoMapFunction``, ``CoFlatMapFunction``,
``CoProcessFunction``, ``KeyedCoProcessFunction``).

Records of input 0 go to the function's ``*1`` method, of input 1 to ``*2``.
Keyed variants make the record's key current (each input with its own selector)
and fire timers through ``on_timer``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from slipstream.datastream.functions import Function
from slipstream.datastream.transformations import CoProcessTransformation
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import OperatorContext
from slipstream.operators.elements import RecordBatch
from slipstream.operators.map import flat_map_results
from slipstream.operators.process import (
    OnTimerOperator,
    ProcessContext,
    UnkeyedTimerService,
    run_process_function,
)
from slipstream.operators.timers import InternalTimerService, KeyedTimerService


def _as_process(kind: str, method: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    """Adapt a map/flat_map method to the process-function shape ``(value, ctx) -> iterable``."""
    if kind == "map":
        return lambda value, ctx: (method(value),)
    if kind == "flat_map":
        return lambda value, ctx: flat_map_results(method(value))
    return method


class CoProcessOperator(OnTimerOperator):
    transformation: CoProcessTransformation
    transformation_type = CoProcessTransformation
    backlog = streamed("a co-process function is called once per record of either input, in arrival order")
    emits_declared_type = True
    num_inputs = 2

    _methods: ClassVar[dict[str, tuple[str, str]]] = {"map": ("map1", "map2"), "flat_map": ("flat_map1", "flat_map2"),
                "process": ("process_element1", "process_element2"),
                "keyed_process": ("process_element1", "process_element2")}

    def __init__(self, transformation: CoProcessTransformation) -> None:
        super().__init__(transformation)
        self.function: Function = transformation.function
        names = self._methods[transformation.kind]
        self.methods = [_as_process(transformation.kind, getattr(self.function, name)) for name in names]
        self.key_selectors = transformation.key_selectors if transformation.is_keyed else [None, None]

    def user_functions(self) -> list[Function]:
        return [self.function]

    def setup(self, ctx: OperatorContext) -> None:
        super().setup(ctx)
        if self.transformation.kind == "keyed_process":
            self.timers: InternalTimerService | None = self.keyed_timers()
            self.context = ProcessContext(self, KeyedTimerService(self.timers))
        else:
            self.timers = None
            self.context = ProcessContext(self, UnkeyedTimerService(self))

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        run_process_function(self, self.methods[input_index], batch, self.context,
                             self.key_selectors[input_index])
