"""The ``slipstream`` command line (also ``python -m slipstream``): run a job script, show its
plan, and look after its checkpoints. See :mod:`slipstream.cli.main`."""

from slipstream.cli.main import main

__all__ = ["main"]
