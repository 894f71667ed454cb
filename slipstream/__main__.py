"""``python -m slipstream``: the ``slipstream`` command line."""

from slipstream.cli import main

main(prog_name="slipstream")
