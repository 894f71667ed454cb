"""A printing job on a terminal: records/s with the backlog display shown and without it, in one run.

The job maps ``--records`` numbers with a function that prints each (a ``print`` in a user
function, one line per record) into a discarding sink. It runs in a child
process whose standard output and error are a pseudo-terminal (read and discarded here), so
the backlog display is drawn as on a user's terminal; the same job with
``configure(show_progress=False)`` is the baseline. A display that captured the job's prints
redrew itself on every one of them.

Run: ``python benchmarks/printing.py [--records N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import pty
import statistics
import subprocess
import sys
import tempfile
import time

from slipstream.datastream import StreamExecutionEnvironment


def show(n: int) -> int:
    """The user function: prints the record and passes it on."""
    print(f"record {n}")
    return n


def run_job(records: int, show_progress: bool) -> float:
    """Run the printing job here (in the child); its records per second."""
    env = StreamExecutionEnvironment.get_execution_environment().configure(show_progress=show_progress)
    env.from_collection(list(range(records))).map(show).add_sink(lambda n: None)
    started = time.perf_counter()
    env.execute("printing")
    return records / (time.perf_counter() - started)


def on_terminal(records: int, show_progress: bool) -> float:
    """Run the job in a child process on a pseudo-terminal; its records per second."""
    master, slave = pty.openpty()
    with tempfile.NamedTemporaryFile("r", suffix=".rate") as result:
        child = subprocess.Popen([sys.executable, __file__, "--child", result.name, "--records", str(records)]
                                 + ([] if show_progress else ["--no-progress"]), stdout=slave, stderr=slave)
        os.close(slave)
        try:
            while os.read(master, 65536):  # drain the terminal until the child closes it
                pass
        except OSError:  # the pseudo-terminal reports its end as an error
            pass
        os.close(master)
        if child.wait() != 0:
            raise RuntimeError("the printing job failed")
        return float(result.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, the median shown")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rate = run_job(args.records, not args.no_progress)
        with open(args.child, "w") as out:
            out.write(repr(rate))
        return
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"{args.records:,} printed records, median of {args.repeat} run(s)")
    for label, shown in (("display shown", True), ("no display", False)):
        rate = statistics.median(on_terminal(args.records, shown) for _ in range(args.repeat))
        print(f"{label:<16}{rate:>12,.0f} rec/s", flush=True)


if __name__ == "__main__":
    main()
