"""The lint and type gate: ruff and mypy, as configured in pyproject.toml, find nothing in slipstream.

`make test` (what CI runs) fails on a new finding, listing it. Both run from this interpreter's
environment, where the `test` extra installs them; mypy keeps its incremental cache in the
repository's `.mypy_cache`, so a warm run takes seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``python -m <tool> ...`` from the repository root, so pyproject.toml's configuration applies."""
    command = [sys.executable, "-m", *arguments]
    return subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_slipstream() -> None:
    result = _run("ruff", "check", "--no-fix", "--output-format", "concise", "slipstream")
    assert result.returncode == 0, f"ruff check slipstream found:\n{result.stdout}{result.stderr}"


def test_mypy_finds_nothing_in_slipstream() -> None:
    result = _run("mypy")  # the files and options are pyproject.toml's [tool.mypy]
    assert result.returncode == 0, f"mypy found:\n{result.stdout}{result.stderr}"
