"""The ``env`` fixture: a fresh environment on every axis a test asks for; the shared SparkSession.

A test that asks for ``env`` runs once per combination of the axes in :data:`AXES`, so a job is
checked in STREAMING and BATCH mode, at parallelism 1, 2 and 4 (PyFlink runs its DataStream tests
in both modes the same way). A marker of an axis's name narrows or widens it for one test, a class
or a module (``pytestmark``); the closest one wins::

    @pytest.mark.modes(RuntimeExecutionMode.STREAMING)   # an event-time test that needs streaming
    @pytest.mark.parallelisms(2, 4)
    @pytest.mark.seeds(*range(5))                        # explore more interleavings
    @pytest.mark.engines("polars", "spark")              # the backlog as batch work on both engines
    @pytest.mark.workers(1, 2)                           # in this process, and on two worker processes
    @pytest.mark.configure(batch_size=2, channel_capacity=2)  # env.configure(...) for every run
    @pytest.mark.zipped(parallelisms=(1, 4), seeds=(0, 3))  # two runs, p1-s0 and p4-s3, not a product

By default each combination runs with one scheduler seed; ``SLIPSTREAM_TEST_SEEDS=N`` runs every
``env`` test with seeds 0..N-1 (a longer run, for a nightly or a hunt for an ordering bug). The
environment's settings are read back from it (``env.get_parallelism()``, ``env.get_runtime_mode()``,
``env.get_batch_engine()``).

The ``engines`` axis says how a job's backlog runs: sorted and run as batch work on ``"polars"``
(the default) or on ``"spark"`` (the session of the :func:`spark` fixture, shared by every Spark
test), or ``"record-by-record"`` (``backlog_sorting=False``). A test that names a batch engine in
its marker must use it: a run whose jobs sorted no backlog on that engine fails at teardown, so a
job the Spark engine does not apply to never passes as a Spark test while running on polars.
Spark runs cost a job each; give the axis to a few representative tests, not a whole module.

The ``workers`` axis runs a job in this process (1, the default) or on N worker processes
(``configure(workers=N)``). A value above 1 runs only at the test's largest parallelism, when that
is above 1: a job of parallelism 1 runs in one process whatever N is (the run would repeat w1), and
at the largest each worker holds several subtasks, so records cross both local channels and the
sockets between workers. A run on N > 1 none of whose jobs ran on worker processes fails at
teardown. Worker processes do not run a manual clock yet (the job is refused naming why; a loop or
an iteration runs with every task of its scope on one worker); what a worker prints, or appends to
a list of the test's, stays in the worker; a source or function holding a lock or a SparkSession
cannot be sent to one: such tests stay on one process. Progress from workers carries records and
latency per operator but not the backlog phase and engine of a sorting operator, so the engines
check runs on the test's runs in one process. Each job on workers forks N processes (a few
milliseconds each once the test process's fork server is up) and sends them the job: give the
axis to end-to-end tests that cover a feature, not to every variant of it.

A job that configures no worker count runs on one worker per core (capped by its parallelism):
the suite sets ``SLIPSTREAM_WORKERS=2`` unless it is set already — what a job gets on a 2-core
machine, whatever the machine running the suite has — so every such job above parallelism 1 runs
on two worker processes, a kill test's job process included; ``SLIPSTREAM_WORKERS=1 pytest ...``
(``make test-one-process``) runs them all in the test's process. A test (or module) whose check
lives in this process — a fault injector failing once by an attribute, a counter in a function, a
monkeypatched module, a seed's exact interleaving, one task manager's memory — is marked
``one_process(reason)`` and keeps its jobs here.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.job_spec import JobSpec
from slipstream.datastream.progress_listener import JobProgressListener, JobTerminatedEvent
from slipstream.runtime import driver
from slipstream.runtime.job_graph import JobGraph
from slipstream.runtime.workers.fork_server import PRELOAD_VARIABLE
from slipstream.runtime.workers.placement import Placement

os.environ.setdefault("SLIPSTREAM_WORKERS", "2")  # see the module docstring: kill tests' job processes inherit it
# a worker running a function of a test module imports that module, and so pytest and hypothesis: the
# fork server imports them once (its workers inherit them), not every worker of every job
os.environ.setdefault(PRELOAD_VARIABLE, "pytest,hypothesis")

pytest_plugins = ("pytester",)  # tests/testing checks the env fixture on tests it runs

TESTS = Path(__file__).resolve().parent


def default_seeds() -> tuple[int, ...]:
    return tuple(range(int(os.environ.get("SLIPSTREAM_TEST_SEEDS", "1"))))


def use_engine(env: StreamExecutionEnvironment, engine: str, request: pytest.FixtureRequest) -> None:
    """Run ``env``'s backlog on ``engine``: a batch engine, or record by record."""
    if engine == "record-by-record":
        env.configure(backlog_sorting=False)
    elif engine == "spark":
        env.set_batch_engine("spark", session=request.getfixturevalue("spark"))
    elif engine == "polars":
        env.set_batch_engine("polars")
    else:
        raise pytest.UsageError(f"{request.node.nodeid}: unknown engine {engine!r} in its engines marker; "
                                f"expected 'polars', 'spark' or 'record-by-record'")


@dataclass(frozen=True)
class Axis:
    """One axis of the ``env`` fixture: the marker naming its values, and how a value is applied.

    ``labelled``: the value is in every test id; else only in the ids of tests whose marker names
    the axis's values (so an axis added later leaves the ids of the tests that ignore it alone).
    """

    marker: str
    help: str
    default: Callable[[], tuple[Any, ...]]
    label: Callable[[Any], str]
    apply: Callable[[StreamExecutionEnvironment, Any, pytest.FixtureRequest], Any]
    labelled: bool = True


# The axes, in the order of a test id's parts.
AXES = (
    Axis("modes", "the runtime modes", lambda: (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH),
         lambda mode: mode.name.lower(), lambda env, mode, _: env.set_runtime_mode(mode)),
    Axis("parallelisms", "the parallelisms", lambda: (1, 2, 4), lambda n: f"p{n}",
         lambda env, n, _: env.set_parallelism(n)),
    Axis("seeds", "the scheduler seeds", default_seeds, lambda seed: f"s{seed}",
         lambda env, seed, _: env.configure(scheduler_seed=seed)),
    Axis("engines", "how the backlog runs: 'polars', 'spark' or 'record-by-record'", lambda: ("polars",), str,
         use_engine, labelled=False),
    Axis("workers", "the worker process counts (configure(workers=N); above 1 only at the largest parallelism)",
         lambda: (1,), lambda n: f"w{n}", lambda env, n, _: env.configure(workers=n), labelled=False),
)


def _runs_as_asked(values: dict[str, Any], largest: int) -> bool:
    """Whether a combination is one the fixture runs: workers above 1 only at the test's largest
    parallelism, when it is above 1 (at parallelism 1 a job runs in one process however many workers
    it is given, and the largest puts several subtasks on each worker, so both local channels and
    channels between workers carry records)."""
    return values["workers"] == 1 or values["parallelisms"] == largest > 1


@dataclass(frozen=True)
class EnvRun:
    """One run of the ``env`` fixture: a value on each axis (by marker name), and the id naming them."""

    values: dict[str, Any]
    id: str
    named: frozenset[str]  # the axes whose values the test's markers named


def pytest_configure(config: pytest.Config) -> None:
    for axis in AXES:
        config.addinivalue_line("markers", f"{axis.marker}(*values): {axis.help} the env fixture runs the test with")
    config.addinivalue_line("markers", "configure(**options): env.configure(**options) for every run of the env "
                                       "fixture (the closest marker's value of each option wins)")
    config.addinivalue_line("markers", "zipped(**axes): the env fixture's axes named here vary together (their "
                                       "i-th values make one run), not as a product")
    config.addinivalue_line("markers", "one_process(reason): the test's jobs that configure no worker count run in "
                                       "this process even under SLIPSTREAM_WORKERS=N (what it checks lives here)")


@pytest.fixture(autouse=True)
def _one_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``one_process(reason)`` keeps its jobs in this process (see the module docstring)."""
    marker = request.node.get_closest_marker("one_process")
    if marker is not None:
        if not marker.args:
            pytest.fail(f"{request.node.nodeid}: one_process needs its reason", pytrace=False)
        monkeypatch.setenv("SLIPSTREAM_WORKERS", "1")


def _zipped(node: pytest.Function) -> dict[str, tuple[Any, ...]]:
    """The axes the ``zipped`` marker ties together: their i-th values make one run."""
    marker = node.get_closest_marker("zipped")
    together = {name: tuple(values) for name, values in (marker.kwargs if marker is not None else {}).items()}
    unknown = set(together) - {axis.marker for axis in AXES}
    if unknown or len({len(values) for values in together.values()}) > 1:
        raise pytest.UsageError(f"{node.nodeid}: zipped takes axes ({', '.join(a.marker for a in AXES)}) with as "
                                f"many values each, got {together}")
    return together


def _runs(metafunc: pytest.Metafunc) -> list[EnvRun]:
    node = metafunc.definition
    together = _zipped(node)
    free = [axis for axis in AXES if axis.marker not in together]
    markers = {axis.marker: node.get_closest_marker(axis.marker) for axis in free}
    named = frozenset(together) | {name for name, marker in markers.items() if marker is not None}
    choices = [axis.default() if markers[axis.marker] is None else tuple(markers[axis.marker].args) for axis in free]
    combinations = [dict(zip(markers, combination)) | dict(zip(together, tied))
                    for tied in (zip(*together.values()) if together else [()])
                    for combination in itertools.product(*choices)]
    largest = max(values["parallelisms"] for values in combinations)
    runs = [EnvRun(values, "-".join(axis.label(values[axis.marker]) for axis in AXES
                                    if axis.labelled or axis.marker in named), named)
            for values in combinations if _runs_as_asked(values, largest)]
    if any(values["workers"] > 1 for values in combinations) and all(run.values["workers"] == 1 for run in runs):
        raise pytest.UsageError(f"{node.nodeid}: its workers marker asks for worker processes, but it runs only at "
                                f"parallelism 1, where a job runs in one process")
    return runs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "env" not in metafunc.fixturenames:
        return
    runs = _runs(metafunc)
    metafunc.parametrize("env", runs, ids=[run.id for run in runs], indirect=True)


def configured_options(node: pytest.Item) -> dict[str, Any]:
    """The options of the ``configure`` markers on ``node``, its class and module; the closest wins."""
    options: dict[str, Any] = {}
    for marker in reversed(list(node.iter_markers("configure"))):
        options.update(marker.kwargs)
    return options


class EngineUse(JobProgressListener):
    """The batch engines the jobs of one test sorted a backlog on (read from each job's last figures)."""

    def __init__(self) -> None:
        self.engines: set[str] = set()

    def on_job_terminated(self, event: JobTerminatedEvent) -> None:
        self.engines.update(op.batch_engine for op in event.progress.operators if op.batch_engine)


class WorkerUse:
    """The placements the driver chose for the jobs of one test: whether any ran on worker processes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on_workers = False
        place = driver.place_subtasks

        def recording(graph: JobGraph, spec: JobSpec) -> Placement | None:
            placement = place(graph, spec)
            self.on_workers |= placement is not None
            return placement
        monkeypatch.setattr(driver, "place_subtasks", recording)


@pytest.fixture
def env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[StreamExecutionEnvironment]:
    """A new environment with this run's value on every axis, after the ``configure`` markers' options;
    a run on a batch engine or on worker processes its jobs did not use fails at teardown."""
    run: EnvRun = request.param
    environment = StreamExecutionEnvironment.get_execution_environment()
    environment.configure(**configured_options(request.node))
    for axis in AXES:
        axis.apply(environment, run.values[axis.marker], request)
    engine, workers = run.values["engines"], run.values["workers"]
    # a run on worker processes reports no operator figures to progress listeners yet (its tasks run
    # elsewhere): the engine a job used is checked on the test's runs in one process
    engines = EngineUse() if "engines" in run.named and engine != "record-by-record" and workers == 1 else None
    if engines is not None:
        environment.add_progress_listener(engines)
    placements = WorkerUse(monkeypatch) if workers > 1 else None
    yield environment
    if engines is not None and engine not in engines.engines:
        pytest.fail(f"{request.node.nodeid} asked for the {engine} engine, but none of its jobs sorted a backlog "
                    f"on it (ran on: {sorted(engines.engines) or 'none'}): the job has no operator whose backlog "
                    f"runs as sorted batch work; drop {engine!r} from its engines marker", pytrace=False)
    if placements is not None and not placements.on_workers:
        pytest.fail(f"{request.node.nodeid} asked for {workers} worker processes, but none of its jobs ran on "
                    f"them (each had parallelism 1, or ran no job): drop it from its workers marker", pytrace=False)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (``local[2]``) for every Spark test and Spark run of ``env``: a JVM
    start costs seconds. Needs pyspark and Java 17 (without pyspark, the test is skipped)."""
    pytest.importorskip("pyspark", reason="the Spark tests need pyspark: pip install -e '.[test,spark]'")
    from slipstream.runtime.batch.spark_engine import start_session
    # functions defined in test modules are pickled by reference: Spark's Python workers (started
    # by the JVM, with this environment) must import the modules from the directories pytest put
    # on sys.path for them (its default "prepend" import mode), all collected before this runs
    test_dirs = [entry for entry in sys.path if entry and Path(entry).resolve().is_relative_to(TESTS)]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*test_dirs, os.environ.get("PYTHONPATH")]))
    session = start_session("local[2]", app_name="slipstream-tests", **{
        "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
        "spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
