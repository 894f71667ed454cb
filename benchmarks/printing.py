"""What the terminal display costs: records/s of two jobs with the display shown and without it.

The printing job maps ``--records`` numbers with a function that prints each (a ``print`` in a
user function, one line per record) into a discarding sink; the keyed job sums ``--keyed``
numbers per key with a Python reduce, printing nothing. Each runs in a child process whose
standard output and error are a pseudo-terminal (read and discarded here), so the display is
drawn as on a user's terminal; the same job with ``configure(show_progress=False)`` is the
baseline. Runs alternate shown / not shown so a change of the machine's load hits both. A display
that captured the job's prints redrew itself on every one of them (44 times slower).

Run: ``python benchmarks/printing.py [--records N] [--keyed N] [--repeat R]``.
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


def run_job(job: str, records: int, show_progress: bool) -> float:
    """Run ``job`` ("printing" or "keyed") here (in the child); its records per second."""
    env = StreamExecutionEnvironment.get_execution_environment().configure(show_progress=show_progress)
    numbers = env.from_collection(list(range(records)))
    if job == "printing":
        numbers.map(show).add_sink(lambda n: None)
    else:
        numbers.map(lambda n: (n % 1000, n)).key_by(lambda pair: pair[0]) \
            .reduce(lambda a, b: (a[0], a[1] + b[1])).add_sink(lambda pair: None)
    started = time.perf_counter()
    env.execute("printing")
    return records / (time.perf_counter() - started)


def on_terminal(job: str, records: int, show_progress: bool) -> float:
    """Run the job in a child process on a pseudo-terminal; its records per second."""
    master, slave = pty.openpty()
    with tempfile.NamedTemporaryFile("r", suffix=".rate") as result:
        child = subprocess.Popen([sys.executable, __file__, "--child", result.name, "--job", job,
                                  "--records", str(records)]
                                 + ([] if show_progress else ["--no-progress"]), stdout=slave, stderr=slave)
        os.close(slave)
        try:
            while os.read(master, 65536):  # drain the terminal until the child closes it
                pass
        except OSError:  # the pseudo-terminal reports its end as an error
            pass
        os.close(master)
        if child.wait() != 0:
            raise RuntimeError(f"the {job} job failed")
        return float(result.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="records of the printing job")
    parser.add_argument("--keyed", type=int, default=500_000, help="records of the keyed job")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, the median shown")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--job", default="printing", help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rate = run_job(args.job, args.records, not args.no_progress)
        with open(args.child, "w") as out:
            out.write(repr(rate))
        return
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"median of {args.repeat} alternating run(s) each")
    for job, records in (("printing", args.records), ("keyed", args.keyed)):
        rates: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeat):
            for shown in (True, False):
                rates[shown].append(on_terminal(job, records, shown))
        shown, hidden = statistics.median(rates[True]), statistics.median(rates[False])
        print(f"{job:<9}{records:>10,} records   display shown {shown:>10,.0f} rec/s   "
              f"no display {hidden:>10,.0f} rec/s   cost {1 - shown / hidden:+.1%}", flush=True)


if __name__ == "__main__":
    main()
