"""``JobID``: a job's id, as PyFlink's ``pyflink.common.JobID`` hands it out."""

from __future__ import annotations


class JobID:
    """The id of a job: 32 hexadecimal digits, the same for every run of the job (across restarts),
    read with :meth:`to_hex_string` (or ``str``)."""

    __slots__ = ("_hex",)

    def __init__(self, hex_string: str) -> None:
        self._hex = hex_string

    def to_hex_string(self) -> str:
        return self._hex

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobID) and other._hex == self._hex

    def __hash__(self) -> int:
        return hash(self._hex)

    def __str__(self) -> str:
        return self._hex

    def __repr__(self) -> str:
        return f"JobID({self._hex!r})"


__all__ = ["JobID"]
