"""``user_code``: the one helper that names a user function's failure by operator and record."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import slipstream
from slipstream.errors import SlipstreamError, UserFunctionError, user_code


class Operator:
    """What user_code needs of an operator: ``user_error`` (as StreamOperator builds it)."""

    def user_error(self, record: object, cause: BaseException, what: str = "record") -> UserFunctionError:
        return UserFunctionError("the op", 1, 4, record, cause, uid="op-uid", what=what)


def test_a_failure_names_the_record_current_when_it_failed_and_chains_the_original() -> None:
    seen: list[int] = []
    value = None
    with pytest.raises(UserFunctionError) as info, user_code(Operator(), lambda: value):
        for value in [1, 2, 3]:
            seen.append(10 // (2 - value))
    assert str(info.value) == ("operator 'the op' (uid 'op-uid'), subtask 2/4, failed on record 2: "
                               "ZeroDivisionError: integer division or modulo by zero")
    assert isinstance(info.value.__cause__, ZeroDivisionError) and info.value.record == 2
    assert seen == [10]


def test_what_may_be_read_at_failure_and_explain_replaces_the_cause_shown() -> None:
    key = "a"
    guard = user_code(Operator(), lambda: "window", what=lambda: f"key {key!r}, window",
                      explain=lambda exc: TypeError(f"explained: {exc}"))
    with guard:  # a guard is reusable: entered once per key
        key = "b"
    failure = r"failed on key 'c', window 'window': TypeError: explained: boom"
    with pytest.raises(UserFunctionError, match=failure) as info, guard:
        key = "c"
        raise ValueError("boom")
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("raised", [SlipstreamError("already named"), KeyboardInterrupt(), GeneratorExit()])
def test_slipstream_s_own_errors_and_non_errors_pass_unchanged(raised: BaseException) -> None:
    with pytest.raises(type(raised)) as info, user_code(Operator(), lambda: None):
        raise raised
    assert info.value is raised


def _hand_rolled_rewraps(tree: ast.AST) -> list[int]:
    """Lines of ``except SlipstreamError: raise`` handlers: the idiom user_code replaces."""
    return [handler.lineno for node in ast.walk(tree) if isinstance(node, ast.Try)
            for handler in node.handlers
            if isinstance(handler.type, ast.Name) and handler.type.id == "SlipstreamError"
            and len(handler.body) == 1 and isinstance(handler.body[0], ast.Raise) and handler.body[0].exc is None]


@pytest.mark.parametrize("package", ["operators", "datastream"])
def test_operators_name_user_failures_only_through_user_code(package: str) -> None:
    root = Path(slipstream.__file__).parent / package
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*.py")):
        lines = _hand_rolled_rewraps(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(root))] = lines
    assert not found, f"wrap user functions with slipstream.errors.user_code instead: {found}"
