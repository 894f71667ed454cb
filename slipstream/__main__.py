"""``python -m slipstream``: the ``slipstream`` command line."""

from slipstream.cli import main

if __name__ == "__main__":  # not when a tool walks the package and imports every module
    main(prog_name="slipstream")
