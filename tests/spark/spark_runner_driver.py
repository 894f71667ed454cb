"""A driver process for the Spark runner's kill test: runs the "reduce" job from a watched
directory into a FileSink on local[2], with its checkpoint location, until killed (or, with
``--available-now``, until what the directory holds is read).

    python spark_runner_driver.py INPUT OUTPUT CHECKPOINT [--available-now]
"""

from __future__ import annotations

import sys
from pathlib import Path

import spark_runner_jobs as jobs

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.runtime.batch.spark_engine import start_session
from slipstream.spark_runner import SparkRunner


def main() -> None:
    input_dir, output, checkpoint = (Path(arg) for arg in sys.argv[1:4])
    session = start_session("local[2]", app_name="slipstream-kill-test", **{
        "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"})
    session.sparkContext.setLogLevel("ERROR")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(200)
    jobs.build(env, "reduce", input_dir, output, watched=True)
    runner = SparkRunner(session, checkpoint_location=str(checkpoint), available_now="--available-now" in sys.argv)
    env.execute("killed and restarted", runner=runner)


if __name__ == "__main__":
    main()
