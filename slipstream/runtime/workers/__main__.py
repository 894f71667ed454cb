"""``python -m slipstream.runtime.workers CONTROL_FD``: a worker process (see :mod:`.worker`)."""

from slipstream.runtime.workers.worker import main

if __name__ == "__main__":
    main()
