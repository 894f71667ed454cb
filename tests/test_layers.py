"""Architecture checks: the layers import one way, and every operator kind has an operator."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import slipstream
from slipstream.datastream import transformations
from slipstream.datastream.transformations import Transformation

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_hold() -> None:
    """runtime -> operators -> datastream -> attributes, as pyproject's import-linter contract says."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    command = [str(lint_imports)] if lint_imports.exists() else [sys.executable, "-m", "importlinter.cli"]
    result = subprocess.run(command + ["--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and " KEPT" in result.stdout
    assert "the runtime reads the frozen JobSpec, never the environment KEPT" in result.stdout


def _all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found.add(sub)
        found |= _all_subclasses(sub)
    return found


def _transformation_kinds() -> list[type[Transformation]]:
    """Every concrete, non-virtual transformation kind defined in slipstream."""
    for module in pkgutil.walk_packages(slipstream.__path__, "slipstream."):
        # import everything so kinds defined outside transformations.py are seen too
        if ".runtime." in module.name or module.name.endswith(".runtime"):
            continue
        importlib.import_module(module.name)
    kinds = {cls for _, cls in inspect.getmembers(transformations, inspect.isclass)
             if issubclass(cls, Transformation) and cls is not Transformation}
    kinds |= {cls for cls in _all_subclasses(Transformation) if cls.__module__.startswith("slipstream.")}
    concrete = []
    for cls in sorted(kinds, key=lambda c: c.__name__):
        if inspect.isabstract(cls):
            continue
        if cls(id=0, name="probe").is_virtual:
            continue
        concrete.append(cls)
    return concrete


def test_the_walk_finds_the_known_kinds() -> None:
    names = {cls.__name__ for cls in _transformation_kinds()}
    assert {"SourceTransformation", "SinkTransformation", "MapTransformation", "KeyedProcessTransformation",
            "WindowTransformation", "CoProcessTransformation", "ReduceTransformation"} <= names
    assert "PartitionTransformation" not in names and "UnionTransformation" not in names


def test_every_transformation_kind_has_an_operator() -> None:
    import slipstream.operators  # noqa: F401  (registers every operator)
    from slipstream.operators.base import StreamOperator

    missing = [cls.__name__ for cls in _transformation_kinds() if cls not in StreamOperator.registry]
    assert not missing, f"no operator registered for: {', '.join(missing)}"
    for cls in _transformation_kinds():
        operator = StreamOperator.registry[cls]
        assert operator.transformation_type is cls
