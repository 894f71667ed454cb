"""What PyFlink's dependency methods mean when the job runs in this very interpreter.

PyFlink ships Python files, archives and requirements to worker processes. slipstream
runs every function in the process that builds the job, so:

* ``add_python_file`` makes the file importable here (its directory, the package's parent
  directory, a directory itself, or a ``.zip``/``.egg``/``.whl`` goes onto ``sys.path``);
* ``set_python_requirements`` installs nothing: it checks that the listed distributions are
  installed in this interpreter and warns naming those that are not;
* ``set_python_executable`` applies when it names this interpreter and warns otherwise;
* ``add_python_archive``, ``add_jars`` and ``add_classpaths`` cannot apply (nothing is
  extracted, there is no JVM): they warn.

A path that does not exist is refused at once, where PyFlink would fail at submission.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import warnings

from slipstream.errors import InvalidProgramError

__all__ = ["check_python_executable", "check_requirements", "make_importable", "warn_not_applied"]

_ARCHIVE_SUFFIXES = (".zip", ".egg", ".whl")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _existing(path: str, what: str) -> str:
    if not isinstance(path, (str, os.PathLike)) or not os.path.exists(path):
        raise InvalidProgramError(f"{what}: no such file or directory: {path!r}")
    return os.path.abspath(path)


def make_importable(file_path: str) -> str:
    """Put what ``file_path`` holds on ``sys.path`` (once); the entry added."""
    path = _existing(file_path, "add_python_file")
    if os.path.isdir(path):
        entry = os.path.dirname(path) if os.path.exists(os.path.join(path, "__init__.py")) else path
    elif path.endswith(_ARCHIVE_SUFFIXES):
        entry = path
    else:
        entry = os.path.dirname(path)
    if entry not in sys.path:
        sys.path.insert(0, entry)
    return entry


def _requirement_names(requirements_file_path: str) -> list[str]:
    names = []
    with open(requirements_file_path, encoding="utf-8") as lines:
        for raw in lines:
            line = raw.split("#", 1)[0].strip()
            match = _REQUIREMENT_NAME.match(line)
            if line and not line.startswith("-") and match:
                names.append(match.group(1))
    return names


def check_requirements(requirements_file_path: str) -> list[str]:
    """The distributions listed in the file that are not installed here (warned about); versions
    are not compared."""
    path = _existing(requirements_file_path, "set_python_requirements")
    missing = []
    for name in _requirement_names(path):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        warnings.warn(f"set_python_requirements: slipstream runs functions in this interpreter and installs "
                      f"nothing; not installed here: {', '.join(missing)}", stacklevel=3)
    return missing


def check_python_executable(python_exec: str) -> bool:
    """Whether ``python_exec`` is this interpreter; warns when it is not (functions run here)."""
    found = shutil.which(python_exec) or python_exec
    same = os.path.exists(found) and os.path.realpath(found) == os.path.realpath(sys.executable)
    if not same:
        warnings.warn(f"set_python_executable({python_exec!r}) is not applied: slipstream runs functions in "
                      f"the interpreter that runs the job ({sys.executable})", stacklevel=3)
    return same


def warn_not_applied(what: str, why: str) -> None:
    """Say that a PyFlink setting was kept but changes nothing here, and why."""
    warnings.warn(f"{what} is not applied: {why}", stacklevel=3)
