"""What a user installs: the wheel's contents, and the documentation site built from the docstrings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_build_ships_py_typed(tmp_path: Path) -> None:
    """``build_py`` lays out what a wheel holds; py.typed (PEP 561) must be among it."""
    source = tmp_path / "source"
    shutil.copytree(ROOT / "slipstream", source / "slipstream", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = tmp_path / "built"
    script = ("import sys, setuptools; "
              f"sys.argv = ['setup.py', '-q', 'build_py', '--build-lib', {str(built)!r}]; setuptools.setup()")
    subprocess.run([sys.executable, "-c", script], cwd=source, check=True, capture_output=True)
    assert (built / "slipstream" / "py.typed").is_file()
    assert (built / "slipstream" / "filesystem.py").is_file()


def test_the_documentation_site_builds_without_a_warning(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (as ``make docs``): README's tour and execution model are included,
    and the API reference is rendered from the docstrings."""
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                            cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stderr
    assert "FLIP-15" in (site / "execution-model" / "index.html").read_text()
    assert "NumberSequenceSource" in (site / "tour" / "index.html").read_text()
    connectors = (site / "api" / "connectors" / "index.html").read_text()
    assert "Reads files with a record format" in connectors  # FileSource's docstring
