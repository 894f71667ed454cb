"""The reliability suite runs on both state backends: every test module here (kills, corruption,
crash points, rescaling, recovery) runs once with jobs keeping keyed state on the heap and once in
RocksDB, through the default backend (``SLIPSTREAM_STATE_BACKEND``, which child processes of kill
tests inherit). ``HEAP_ONLY`` names the modules that test the heap backend's own file formats. A test
that parametrizes ``state_backend`` itself (``indirect``) pairs each backend with its other
parameters instead of running every case on both: the slow kill batteries whose subject is a loop
or an iteration, not the backend, cover each backend once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slipstream.datastream.state_backend import DEFAULT_VARIABLE

BACKENDS = ["hashmap", "rocksdb"]

HEAP_ONLY = {
    "test_state_files": "the heap backend's Arrow and pickle formats per state",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    own = any("state_backend" in marker.args[0] for marker in metafunc.definition.iter_markers("parametrize"))
    if "state_backend" in metafunc.fixturenames and not own:
        module = metafunc.module.__name__.rsplit(".", 1)[-1]
        backends = ["hashmap"] if module in HEAP_ONLY else BACKENDS
        metafunc.parametrize("state_backend", backends, indirect=True, scope="module")


@pytest.fixture(autouse=True, scope="module")
def state_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The state backend this module's jobs run on."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DEFAULT_VARIABLE, request.param)
        yield request.param
