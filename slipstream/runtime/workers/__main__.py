"""``python -m slipstream.runtime.workers --fork-server FD``: a driver's fork server, which forks its
worker processes (:mod:`.fork_server`, running :func:`.worker.main` in each)."""

import sys

from slipstream.runtime.workers.fork_server import serve
from slipstream.runtime.workers.worker import main

if __name__ == "__main__":
    if sys.argv[1:2] != ["--fork-server"] or len(sys.argv) != 3:
        sys.exit("usage: python -m slipstream.runtime.workers --fork-server FD (started by a driver)")
    serve(int(sys.argv[2]), main)
