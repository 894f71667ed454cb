"""The README's Python examples run as a newcomer would paste them: each block that builds its own
environment runs in a fresh interpreter and ends without an error, printing what its comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
EXAMPLES = [block for block in re.findall(r"```python\n(.*?)```", README, re.S)
            if "import" in block and "get_execution_environment" in block]


def test_the_readme_has_its_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("example", EXAMPLES, ids=[block.splitlines()[-1][:40] for block in EXAMPLES])
def test_a_readme_example_runs(example: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if "TestStream" in example:  # its comment says what it prints
        assert done.stdout.strip().splitlines()[-1] == "[10, 20, 10, 20, 30]"
    else:
        assert "('be', 2)" in done.stdout and "Job graph" in done.stdout
