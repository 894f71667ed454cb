"""``BucketAssigner``: the subdirectory of a ``FileSink``'s base path a record's part file goes to.

As Flink's: ``base_path_bucket_assigner()`` writes into the base path itself, and
``date_time_bucket_assigner(format_str, timezone_id)`` into a directory named by the processing time
a record is written at, formatted with a Java ``DateTimeFormatter`` pattern (Flink's default
``yyyy-MM-dd--HH``: a directory an hour). slipstream's ``FileSink`` writes into the base path unless
given a date-time assigner (Flink's default is the date-time one).

Examples:
    >>> import datetime
    >>> assigner = BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC")
    >>> assigner.bucket_id(datetime.datetime(2026, 11, 30, 23, 5, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    '2026-11-30--23'
    >>> BucketAssigner.base_path_bucket_assigner().bucket_id(0)
    ''
"""

from __future__ import annotations

import datetime
import re
import zoneinfo

from slipstream.errors import InvalidProgramError

_PATTERN_LETTERS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
"""The Java ``DateTimeFormatter`` letters a bucket pattern may use, and their ``strftime`` codes."""
_TOKEN = re.compile(r"'([^']*)'|(yyyy|yy|MM|dd|HH|mm|ss)|([A-Za-z])|([^A-Za-z']+)")


def java_pattern_to_strftime(pattern: str) -> str:
    """A ``strftime`` format writing what the Java ``DateTimeFormatter`` ``pattern`` writes."""
    out = []
    for quoted, letters, unknown, literal in _TOKEN.findall(pattern):
        if unknown:
            raise InvalidProgramError(f"bucket format {pattern!r}: pattern letter {unknown!r} is not supported "
                                      f"(use {', '.join(_PATTERN_LETTERS)} and quoted text)")
        text = _PATTERN_LETTERS[letters] if letters else (quoted or literal)
        out.append(text if letters else text.replace("%", "%%"))
    return "".join(out)


class BucketAssigner:
    """Which bucket (a directory under the base path, "" for the base path) a part file belongs to."""

    def __init__(self, format_str: str | None = None, timezone_id: str | None = None) -> None:
        """Use :meth:`base_path_bucket_assigner` or :meth:`date_time_bucket_assigner`."""
        self.format_str = format_str
        self.timezone_id = timezone_id
        self._strftime = None if format_str is None else java_pattern_to_strftime(format_str)
        try:
            self._zone = None if timezone_id is None else zoneinfo.ZoneInfo(timezone_id)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidProgramError(f"bucket assigner: unknown time zone {timezone_id!r}") from exc

    @staticmethod
    def base_path_bucket_assigner() -> BucketAssigner:
        """Every part file in the base path."""
        return BucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None
                                  ) -> BucketAssigner:
        """A directory per value of the processing time formatted with ``format_str``, in the zone
        ``timezone_id`` (None: this machine's)."""
        return BucketAssigner(format_str, timezone_id)

    def bucket_id(self, now_ms: float) -> str:
        """The bucket of a record written at ``now_ms`` (wall-clock ms since the epoch)."""
        if self._strftime is None:
            return ""
        moment = datetime.datetime.fromtimestamp(now_ms / 1000, self._zone)
        return moment.strftime(self._strftime)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BucketAssigner) and (self.format_str, self.timezone_id) == \
            (other.format_str, other.timezone_id)

    def __hash__(self) -> int:
        return hash((self.format_str, self.timezone_id))

    def __repr__(self) -> str:
        if self.format_str is None:
            return "BucketAssigner.base_path_bucket_assigner()"
        return f"BucketAssigner.date_time_bucket_assigner({self.format_str!r}, {self.timezone_id!r})"


__all__ = ["BucketAssigner", "java_pattern_to_strftime"]
