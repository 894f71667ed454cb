"""``co_group`` and ``join``: two streams windowed together by key.

As Flink's ``CoGroupedStreams``/``JoinedStreams`` (PyFlink has neither)::

    a.co_group(b).where(key_a).equal_to(key_b).window(assigner).apply(fn)
    a.join(b).where(key_a).equal_to(key_b).window(assigner).apply(join_fn)

Key selectors are ``KeySelector`` objects, callables, field positions or field names.
Before ``apply``, ``trigger``, ``evictor`` and ``allowed_lateness`` may replace the
assigner's defaults. Each window of each key is evaluated once per trigger firing;
results carry the window's ``max_timestamp()`` (``MAX_TIMESTAMP`` for
:class:`~slipstream.datastream.window.EndOfStreamWindows`), as in Flink.

Functions:

* :class:`CoGroupFunction` — ``co_group(first, second)`` gets the two sides of one key
  in one window (lists, either possibly empty, never both) and yields outputs. A plain
  callable ``(first, second) -> iterable`` is accepted too.
* :class:`VectorizedCoGroupFunction` — ``co_group(first, second)`` gets polars
  DataFrames holding the two sides of *many keys* of a window (all keys of the window in
  the batch path) and returns a DataFrame whose rows are emitted. Pass an instance, or
  a callable with ``apply(fn, vectorized=True)``. See the class for the rules.
* :class:`JoinFunction` — ``join(first, second)`` returns one output per pair of
  records with equal keys in the same window (an inner join: keys seen on one side only
  produce nothing). :class:`FlatJoinFunction` yields any number of outputs per pair. A
  plain callable is a ``JoinFunction``, a generator function a ``FlatJoinFunction``.

Examples:
    >>> from slipstream.datastream import StreamExecutionEnvironment
    >>> from slipstream.datastream.window import EndOfStreamWindows
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> orders = env.from_collection([("alice", 3), ("bob", 5), ("alice", 4)])
    >>> names = env.from_collection([("alice", "Alice A."), ("carol", "Carol C.")])
    >>> totals = (orders.co_group(names).where(0).equal_to(0).window(EndOfStreamWindows.get())
    ...           .apply(lambda first, second: [(len(first), len(second))]))
    >>> sorted(totals.execute_and_collect())
    [(0, 1), (1, 0), (2, 1)]

Runs as batch work during backlog (see :mod:`slipstream.operators.co_group`).
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from slipstream.attributes import OperatorAttributes
from slipstream.datastream.functions import (
    Function,
    RuntimeContext,
    as_function,
    function_name,
)
from slipstream.datastream.time import Duration, Time, to_millis
from slipstream.datastream.transformations import CoGroupTransformation
from slipstream.datastream.window import (
    Evictor,
    MergingWindowAssigner,
    Trigger,
    WindowAssigner,
)
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    import polars as pl

    from slipstream.datastream.data_stream import DataStream

IN1 = TypeVar("IN1")
IN2 = TypeVar("IN2")
OUT = TypeVar("OUT")


# -- functions --------------------------------------------------------------------------------------
class CoGroupFunction(Function, Generic[IN1, IN2, OUT]):
    """Evaluates the two sides of one key in one window; yields (or returns an iterable of) outputs.

    Called once per key per window firing, with the first input's records of that key and
    window in ``first`` and the second's in ``second`` (each in arrival order in streaming,
    in an unspecified order in the batch path; one may be empty).
    """

    @abstractmethod
    def co_group(self, first: Iterable[IN1], second: Iterable[IN2]) -> Iterable[OUT]: ...


class VectorizedCoGroupFunction(Function):
    """Evaluates the two sides of many keys of one window at once, as polars DataFrames.

    ``co_group(first, second)`` receives one DataFrame per input and returns a DataFrame
    (or None for nothing); each of its rows becomes one output record.

    * Columns: records that are tuples (or unnamed Rows, or scalars) become columns
      ``f0``, ``f1``, …; dicts and named Rows become columns of their field names. A
      ``RowTypeInfo``/``TupleTypeInfo`` declared on the input stream fixes the column
      types (and gives an empty side its columns); otherwise polars infers them from the
      records, and an empty side reuses the columns last seen on that input.
    * Keys: the frames hold the records of *several* keys — every key of the window when
      the window runs as batch work, the keys whose window fired together in streaming —
      so the function must treat keys independently (group or join on the key columns).
      Then every path gives the same result, and ``co_group`` by key is the fast way to
      write it: one polars query for the whole backlog instead of one Python call per key.
    * Rows out: emitted as tuples when the window's records are tuples (or scalars), as
      named Rows when they are Rows, as dicts when they are dicts — the kind of the first
      record of the window, first input first.
    """

    @abstractmethod
    def co_group(self, first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame | None: ...


class JoinFunction(Function, Generic[IN1, IN2, OUT]):
    """Combines one record of each input with equal keys in the same window into one output."""

    @abstractmethod
    def join(self, first: IN1, second: IN2) -> OUT: ...


class FlatJoinFunction(Function, Generic[IN1, IN2, OUT]):
    """Combines one record of each input with equal keys in the same window; yields outputs."""

    @abstractmethod
    def join(self, first: IN1, second: IN2) -> Iterable[OUT]: ...


class JoinCoGroupFunction(CoGroupFunction[Any, Any, Any]):
    """A join as a co_group: the nested loop over both sides of a key (inner join).

    Opens, closes and declares attributes through the join function it wraps, so the user
    sees the lifecycle of their own function.
    """

    def __init__(self, join_function: JoinFunction[Any, Any, Any] | FlatJoinFunction[Any, Any, Any]) -> None:
        self.join_function = join_function
        self._flat = isinstance(join_function, FlatJoinFunction)

    def open(self, runtime_context: RuntimeContext) -> None:
        self.join_function.open(runtime_context)

    def close(self) -> None:
        self.join_function.close()

    def get_operator_attributes(self) -> OperatorAttributes | None:
        return self.join_function.get_operator_attributes()

    def co_group(self, first: Iterable[Any], second: Iterable[Any]) -> Iterable[Any]:
        join = self.join_function.join
        second = second if isinstance(second, list) else list(second)
        if not second:
            return
        if self._flat:
            for left in first:
                for right in second:
                    results = join(left, right)
                    if results is not None:
                        yield from results
        else:
            for left in first:
                for right in second:
                    yield join(left, right)

    def __repr__(self) -> str:
        return f"Join({function_name(self.join_function)})"


def _join_function(function: Any) -> JoinFunction[Any, Any, Any] | FlatJoinFunction[Any, Any, Any]:
    if isinstance(function, (JoinFunction, FlatJoinFunction)):
        return function
    kind = FlatJoinFunction if inspect.isgeneratorfunction(function) else JoinFunction
    joined: JoinFunction[Any, Any, Any] | FlatJoinFunction[Any, Any, Any] = \
        as_function(function, kind, "join", 2, "JoinedStreams.apply")
    return joined


# -- builders ---------------------------------------------------------------------------------------
class _TwoStreams:
    """What co_group and join share: the two inputs; ``where`` starts the key specification."""

    _api = ""
    _operation = ""

    def __init__(self, input1: DataStream[Any], input2: DataStream[Any]) -> None:
        from slipstream.datastream.data_stream import DataStream
        if not isinstance(input2, DataStream):
            raise InvalidProgramError(f"DataStream.{self._operation} expects a DataStream, got {input2!r}")
        env = input1.get_execution_environment()
        env._check_same_environment(input2, self._operation)
        env._check_same_scope([input1.get_transformation(), input2.get_transformation()], self._operation)
        self.input1 = input1
        self.input2 = input2

    def where(self, key_selector: Any, key_type: Any = None) -> Where:
        """The key of the first input's records (a KeySelector, callable, field position or name)."""
        from slipstream.datastream.data_stream import _key_selector
        return Where(self, _key_selector(key_selector, f"{self._api}.where"))

    def _function(self, function: Any, vectorized: bool) -> tuple[Any, bool]:
        """The operator's function (a co_group-shaped one) and whether it is vectorised."""
        raise NotImplementedError


class CoGroupedStreams(_TwoStreams):
    """What ``DataStream.co_group`` returns: ``where(...).equal_to(...).window(...).apply(fn)``."""

    _api = "CoGroupedStreams"
    _operation = "co_group"

    def _function(self, function: Any, vectorized: bool) -> tuple[Any, bool]:
        if isinstance(function, VectorizedCoGroupFunction):
            return function, True
        if vectorized:
            if isinstance(function, Function):
                raise InvalidProgramError("CoGroupedStreams.apply(vectorized=True) expects a "
                                          "VectorizedCoGroupFunction or a callable, got a "
                                          f"{type(function).__name__}")
            return as_function(function, VectorizedCoGroupFunction, "co_group", 2,
                               "CoGroupedStreams.apply"), True
        return as_function(function, CoGroupFunction, "co_group", 2, "CoGroupedStreams.apply"), False


class JoinedStreams(_TwoStreams):
    """What ``DataStream.join`` returns: ``where(...).equal_to(...).window(...).apply(join_fn)``."""

    _api = "JoinedStreams"
    _operation = "join"

    def _function(self, function: Any, vectorized: bool) -> tuple[Any, bool]:
        if vectorized:
            raise InvalidProgramError("JoinedStreams.apply has no vectorised form: co_group with a "
                                      "VectorizedCoGroupFunction and join the two DataFrames in it")
        return JoinCoGroupFunction(_join_function(function)), False


class Where:
    """``where(...)`` was given: ``equal_to(...)`` names the second input's key."""

    def __init__(self, streams: _TwoStreams, selector: Callable[[Any], Any]) -> None:
        self._streams = streams
        self._selector = selector

    def equal_to(self, key_selector: Any, key_type: Any = None) -> EqualTo:
        """The key of the second input's records; records of both inputs with equal keys meet."""
        from slipstream.datastream.data_stream import _key_selector
        selector = _key_selector(key_selector, f"{self._streams._api}.equal_to")
        return EqualTo(self._streams, (self._selector, selector))


class EqualTo:
    """Both keys are given: ``window(assigner)`` says which records of a key meet."""

    def __init__(self, streams: _TwoStreams,
                 selectors: tuple[Callable[[Any], Any], Callable[[Any], Any]]) -> None:
        self._streams = streams
        self._selectors = selectors

    def window(self, assigner: WindowAssigner[Any, Any]) -> WithWindow:
        """Group each key's records of both inputs by the windows ``assigner`` gives them."""
        if not isinstance(assigner, WindowAssigner):
            raise InvalidProgramError(f"{self._streams._api}.window expects a WindowAssigner, "
                                      f"got {assigner!r}")
        return WithWindow(self._streams, self._selectors, assigner)


class WithWindow:
    """A windowed co_group or join, waiting for options and its function (``apply``)."""

    def __init__(self, streams: _TwoStreams, selectors: tuple[Callable[[Any], Any], Callable[[Any], Any]],
                 assigner: WindowAssigner[Any, Any]) -> None:
        self._streams = streams
        self._selectors = selectors
        self._assigner = assigner
        self._api = streams._api
        self._trigger: Trigger[Any, Any] | None = None
        self._evictor: Evictor[Any, Any] | None = None
        self._allowed_lateness = 0

    def trigger(self, trigger: Trigger[Any, Any]) -> WithWindow:
        """Replace the assigner's default trigger (it sees the elements of both inputs)."""
        if not isinstance(trigger, Trigger):
            raise InvalidProgramError(f"{self._api}.trigger expects a Trigger, got {trigger!r}")
        if isinstance(self._assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise InvalidProgramError(f"{self._api}.trigger: {trigger!r} cannot merge windows, which the "
                                      f"merging assigner {self._assigner!r} needs")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Evictor[Any, Any]) -> WithWindow:
        """Evict elements (of both inputs) before/after the function runs."""
        if not isinstance(evictor, Evictor):
            raise InvalidProgramError(f"{self._api}.evictor expects an Evictor, got {evictor!r}")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: int | Duration | Time) -> WithWindow:
        """Keep event-time windows this long past their end, re-firing them for late elements."""
        lateness = to_millis(time_ms, "allowed lateness")
        if lateness < 0:
            raise InvalidProgramError(f"{self._api}.allowed_lateness must not be negative, got {lateness}")
        self._allowed_lateness = lateness
        return self

    def apply(self, function: Any, output_type: Any = None, vectorized: bool = False) -> DataStream[Any]:
        """Evaluate the window with ``function``.

        co_group: a :class:`CoGroupFunction`, a :class:`VectorizedCoGroupFunction`, or a
        callable ``(first, second) -> iterable`` (vectorised when ``vectorized``).
        join: a :class:`JoinFunction`, a :class:`FlatJoinFunction`, or a callable.
        """
        from slipstream.datastream.data_stream import DataStream
        streams = self._streams
        operator_function, is_vectorized = streams._function(function, vectorized)
        env = streams.input1.get_execution_environment()
        keyed1 = streams.input1.key_by(self._selectors[0])
        keyed2 = streams.input2.key_by(self._selectors[1])
        trigger = self._trigger or self._assigner.get_default_trigger(env)
        user_function = getattr(operator_function, "join_function", operator_function)
        parts = [repr(self._assigner), repr(trigger)]
        if self._evictor is not None:
            parts.append(repr(self._evictor))
        parts.append(function_name(user_function))
        kind = streams._operation
        name = f"{'CoGroup' if kind == 'co_group' else 'Join'}({', '.join(parts)})"
        transformation = env._add_transformation(
            CoGroupTransformation, name, [keyed1.get_transformation(), keyed2.get_transformation()],
            output_type=output_type, key_selectors=list(self._selectors), assigner=self._assigner,
            trigger=trigger, evictor=self._evictor, allowed_lateness=self._allowed_lateness,
            function=operator_function, vectorized=is_vectorized, kind=kind,
            input_types=[streams.input1.get_type(), streams.input2.get_type()])
        return DataStream(env, transformation)
