"""The ``env`` fixture: a fresh environment in every runtime mode × parallelism × scheduler seed.

A test that asks for ``env`` runs once per combination, so a job is checked in STREAMING and
BATCH mode, at parallelism 1, 2 and 4 (PyFlink runs its DataStream tests in both modes the same
way). Markers narrow or widen the axes for one test::

    @pytest.mark.modes(RuntimeExecutionMode.STREAMING)   # an event-time test that needs streaming
    @pytest.mark.parallelisms(2, 4)
    @pytest.mark.seeds(*range(5))                        # explore more interleavings

By default each combination runs with one scheduler seed; ``SLIPSTREAM_TEST_SEEDS=N`` runs every
``env`` test with seeds 0..N-1 (a longer run, for a nightly or a hunt for an ordering bug). The
environment's settings are read back from it (``env.get_parallelism()``, ``env.get_runtime_mode()``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

MODES = (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH)
PARALLELISMS = (1, 2, 4)


def default_seeds() -> tuple[int, ...]:
    return tuple(range(int(os.environ.get("SLIPSTREAM_TEST_SEEDS", "1"))))


@dataclass(frozen=True)
class EnvSettings:
    """One combination of the ``env`` fixture's axes."""

    mode: RuntimeExecutionMode
    parallelism: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.mode.name.lower()}-p{self.parallelism}-s{self.seed}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "modes(*modes): the runtime modes the env fixture runs the test in")
    config.addinivalue_line("markers", "parallelisms(*ns): the parallelisms the env fixture runs the test at")
    config.addinivalue_line("markers", "seeds(*seeds): the scheduler seeds the env fixture runs the test with")


def _axis(metafunc: pytest.Metafunc, name: str, default: tuple) -> tuple:
    marker = metafunc.definition.get_closest_marker(name)
    return tuple(marker.args) if marker is not None else default


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "env" not in metafunc.fixturenames:
        return
    settings = [EnvSettings(mode, parallelism, seed)
                for mode in _axis(metafunc, "modes", MODES)
                for parallelism in _axis(metafunc, "parallelisms", PARALLELISMS)
                for seed in _axis(metafunc, "seeds", default_seeds())]
    metafunc.parametrize("env", settings, ids=[s.id for s in settings], indirect=True)


@pytest.fixture
def env(request: pytest.FixtureRequest) -> StreamExecutionEnvironment:
    """A new environment in the mode, at the parallelism and with the scheduler seed of this run."""
    settings: EnvSettings = request.param
    environment = StreamExecutionEnvironment.get_execution_environment()
    environment.set_runtime_mode(settings.mode).set_parallelism(settings.parallelism)
    environment.configure(scheduler_seed=settings.seed)
    return environment
