"""A Spark runner driver SIGKILLed mid-stream and started again on the same checkpoint location
commits every record exactly once (Spark's file source, state and file sink log resume together)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import spark_runner_jobs as jobs

import slipstream

DRIVER = Path(__file__).with_name("spark_runner_driver.py")


def driver_env() -> dict[str, str]:
    """The driver's environment: it imports the slipstream under test (a script's own directory
    comes first on its path, not the working directory), its workers the test modules too."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(slipstream.__file__).parents[1]), os.environ.get("PYTHONPATH")]))}


def committed_batches(output: Path) -> int:
    log = output / "_spark_metadata"
    return len([p for p in log.iterdir() if not p.name.startswith(".")]) if log.is_dir() else 0


def logged(directory: Path) -> int:
    """How many micro-batches a log of the query's checkpoint (offsets, commits) names."""
    return len([p for p in directory.iterdir() if p.name.isdigit()]) if directory.is_dir() else 0


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_killed_driver_resumes_exactly_once_on_its_checkpoint_location(spark: object, tmp_path: Path) -> None:
    input_dir, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    jobs.write_input(input_dir, range(2))
    args = [sys.executable, str(DRIVER), str(input_dir), str(output), str(checkpoint)]
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(args, start_new_session=True, stdout=log, stderr=log, env=driver_env())
    try:
        wait_for(lambda: committed_batches(output) >= 1 or first.poll() is not None, 180, "a first committed batch")
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        done = logged(checkpoint / "commits")
        jobs.write_input(input_dir, range(2, 6))
        # killed while a micro-batch runs: its offsets are logged, its commit is not
        wait_for(lambda: logged(checkpoint / "offsets") > done, 60, "a micro-batch of the new files")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and the JVM it started, at once
        first.wait()
        log.close()
    jobs.write_input(input_dir, range(6, 8))
    second = subprocess.run([*args, "--available-now"], capture_output=True, timeout=300, check=False,
                            env=driver_env())
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert jobs.spark_committed_lines(output) == jobs.oracle("reduce", range(8))
