"""``Configuration``: key/value settings, as ``pyflink.common.Configuration``.

Values keep the type they were set with (string, integer, boolean, float, bytes)
and are converted when read with another getter, as Flink's Java ``Configuration``
does: ``set_string("n", "3")`` then ``get_integer("n", 0)`` gives 3, and
``to_dict()`` gives every value as the string Flink would print (``true``, not
``True``). ``env.configure(configuration)`` applies the keys slipstream knows
(see :mod:`slipstream.datastream.pipeline_options`) and keeps the others readable.

Examples:
    >>> config = Configuration().set_string("k1", "v1").set_integer("k2", 1)
    >>> str(config), config.get_string("k2", ""), config.to_dict()
    ('{k1=v1, k2=1}', '1', {'k1': 'v1', 'k2': '1'})
"""

from __future__ import annotations

import base64
from typing import Any, overload

__all__ = ["Configuration"]


def _to_string(value: Any) -> str:
    """A value as Flink's Java ``Configuration`` prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


class Configuration:
    """Settings by key; ``Configuration(other)`` starts as a copy of ``other``."""

    def __init__(self, other: Configuration | None = None) -> None:
        if other is not None and not isinstance(other, Configuration):
            raise TypeError(f"Configuration(other) expects a Configuration, got {other!r}")
        self._values: dict[str, Any] = {} if other is None else dict(other._values)

    # -- typed getters and setters ----------------------------------------------------------------
    @overload
    def get_string(self, key: str, default_value: str) -> str: ...

    @overload
    def get_string(self, key: str, default_value: None) -> str | None: ...

    def get_string(self, key: str, default_value: str | None) -> str | None:
        """The value of ``key`` as a string, or ``default_value`` when it is not set."""
        if key not in self._values:
            return default_value
        return _to_string(self._values[key])

    def set_string(self, key: str, value: str) -> Configuration:
        return self._set(key, str(value))

    def get_integer(self, key: str, default_value: int) -> int:
        """The value of ``key`` as an integer (a string is parsed); ValueError names key and value."""
        if key not in self._values:
            return default_value
        value = self._values[key]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise self._unreadable(key, value, "an integer")

    def set_integer(self, key: str, value: int) -> Configuration:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"set_integer({key!r}, ...) expects an int, got {value!r}")
        return self._set(key, value)

    def get_boolean(self, key: str, default_value: bool) -> bool:
        """The value of ``key`` as a boolean (``"true"``/``"false"`` in any case are read too)."""
        if key not in self._values:
            return default_value
        value = self._values[key]
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self._unreadable(key, value, "a boolean")

    def set_boolean(self, key: str, value: bool) -> Configuration:
        if not isinstance(value, bool):
            raise TypeError(f"set_boolean({key!r}, ...) expects True or False, got {value!r}")
        return self._set(key, value)

    def get_float(self, key: str, default_value: float) -> float:
        """The value of ``key`` as a float (an integer or a numeric string is converted)."""
        if key not in self._values:
            return float(default_value)
        value = self._values[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise self._unreadable(key, value, "a float")

    def set_float(self, key: str, value: float) -> Configuration:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"set_float({key!r}, ...) expects a number, got {value!r}")
        return self._set(key, float(value))

    def get_bytearray(self, key: str, default_value: bytearray) -> bytearray:
        if key not in self._values:
            return default_value
        value = self._values[key]
        if isinstance(value, bytes):
            return bytearray(value)
        raise self._unreadable(key, value, "bytes")

    def set_bytearray(self, key: str, value: bytes | bytearray) -> Configuration:
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"set_bytearray({key!r}, ...) expects bytes or a bytearray, got {value!r}")
        return self._set(key, bytes(value))

    # -- the whole configuration -----------------------------------------------------------------
    def key_set(self) -> set[str]:
        return set(self._values)

    def contains_key(self, key: str) -> bool:
        return key in self._values

    def remove_config(self, key: str) -> bool:
        """Remove ``key``; whether it was there."""
        return self._values.pop(key, _MISSING) is not _MISSING

    def add_all(self, other: Configuration, prefix: str | None = None) -> Configuration:
        """Copy every entry of ``other`` into this one, its keys prefixed with ``prefix`` if given."""
        if not isinstance(other, Configuration):
            raise TypeError(f"add_all expects a Configuration, got {other!r}")
        for key, value in other._values.items():
            self._values[key if prefix is None else prefix + key] = value
        return self

    def add_all_to_dict(self, target_dict: dict[str, Any]) -> None:
        """Put every entry into ``target_dict`` with its typed value (bytes as a bytearray)."""
        target_dict.update({key: bytearray(value) if isinstance(value, bytes) else value
                            for key, value in self._values.items()})

    def to_dict(self) -> dict[str, str]:
        """Every entry with its value as a string."""
        return {key: _to_string(value) for key, value in self._values.items()}

    # -- helpers ---------------------------------------------------------------------------------
    def _set(self, key: str, value: Any) -> Configuration:
        if not isinstance(key, str) or not key:
            raise TypeError(f"a configuration key must be a non-empty string, got {key!r}")
        self._values[key] = value
        return self

    @staticmethod
    def _unreadable(key: str, value: Any, wanted: str) -> ValueError:
        return ValueError(f"configuration key {key!r} holds {value!r}, which is not {wanted}")

    def __deepcopy__(self, memo: dict[int, Any]) -> Configuration:
        return Configuration(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self._values == other._values

    def __hash__(self) -> int:
        return hash(frozenset(self._values.items()))

    def __str__(self) -> str:
        return "{" + ", ".join(f"{key}={_to_string(value)}" for key, value in self._values.items()) + "}"

    def __repr__(self) -> str:
        return f"Configuration({self})"


_MISSING = object()
