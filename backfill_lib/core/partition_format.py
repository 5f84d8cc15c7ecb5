"""String date partitions: the Spark (Java) datetime pattern a ``STRING`` partition column is written in. Pure.

A target partitioned by a string column (``dt = '2024-03-10'``, the Hive habit) names its pattern in
``target.partition_format``. The plan's partition keys are then the strings themselves, rendered from each
partition's start exactly as Spark's ``date_format(value, pattern)`` renders it, and every predicate on the
column compares strings (``dt IN ('2024-03-09', '2024-03-10')``), so Delta's ``replaceWhere`` stays a
partition-only predicate.

Supported pattern letters (the subset of Spark's datetime patterns a partition start needs):

- ``yyyy`` (or ``uuuu``): the year, four digits;
- ``MM`` / ``M``: the month, two digits / no padding; ``dd`` / ``d`` the day; ``HH`` / ``H`` the hour (0-23);
- ``mm``, ``ss``: minutes and seconds, always ``00`` (hours start on the hour);
- ``XXX`` / ``XX`` / ``X``: the offset from UTC (``+01:00`` / ``+0100`` / ``+01``, ``Z`` for UTC); ``xxx`` /
  ``xx`` / ``x`` the same with ``+00:00`` / ``+0000`` / ``+00`` for UTC; ``Z``: ``+0000``;
- text in single quotes (``'T'``; ``''`` is one quote) and any character that is not a letter, as they are.

A ``day`` pattern holds year, month and day and no time; a ``month`` pattern year and month (a day renders
``01``); an ``hour`` pattern year, month, day and hour. Hours render in the request's time zone: the local
wall clock. Without an offset that wall clock repeats at a daylight-saving fall-back (``2024-11-03-01`` is two
hours in America/New_York), so the plan refuses a range across one (see
:func:`backfill_lib.plan.model.build_plan`); a pattern with an offset, or ``time_zone: UTC``, is unambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache

from backfill_lib.core.errors import PartitionError
from backfill_lib.core.zones import zone

_LETTERS = {"y": "year", "u": "year", "M": "month", "d": "day", "H": "hour", "m": "minute", "s": "second",
            "X": "offset", "x": "offset", "Z": "offset"}
_SUPPORTED = "yyyy, MM, M, dd, d, HH, H, mm, ss, X, XX, XXX, x, xx, xxx, Z and quoted text"


@dataclass(frozen=True)
class _Field:
    letter: str
    width: int

    @property
    def kind(self) -> str:
        return _LETTERS[self.letter]


@dataclass(frozen=True)
class PartitionFormat:
    """A checked partition pattern: its text and its fields and literals, in order.

    Examples
    --------
    >>> f = PartitionFormat.of("yyyyMMdd")
    >>> f.render(date(2024, 3, 9), "day", "UTC")
    '20240309'
    >>> f.parse("20240309", "day", "UTC")
    datetime.date(2024, 3, 9)
    """

    pattern: str
    tokens: tuple[_Field | str, ...]

    @staticmethod
    def of(pattern: str) -> "PartitionFormat":
        """The format of ``pattern`` (cached).

        Raises
        ------
        PartitionError
            Naming the pattern and the letter or quote at fault.
        """
        return _compile(pattern)

    @property
    def kinds(self) -> set[str]:
        return {t.kind for t in self.tokens if isinstance(t, _Field)}

    @property
    def has_offset(self) -> bool:
        """Whether the pattern renders the offset from UTC (so a repeated local hour renders twice distinctly)."""
        return "offset" in self.kinds

    def check_grain(self, grain: str) -> None:
        """Raise :class:`PartitionError` unless the pattern renders exactly a partition of ``grain`` (``day``,
        ``month``, ``hour``): its fields must name the partition's start and nothing finer."""
        need = {"day": {"year", "month", "day"}, "month": {"year", "month"}, "hour": {"year", "month", "day", "hour"}}[grain]
        allowed = need | ({"day"} if grain == "month" else set()) | (
            {"minute", "second", "offset"} if grain == "hour" else set())
        order = ["year", "month", "day", "hour"]
        missing = sorted(need - self.kinds, key=order.index)
        extra = sorted(self.kinds - allowed)
        if missing:
            raise PartitionError(f"partition_format '{self.pattern}' has no {' or '.join(missing)} "
                                 f"(grain {grain} needs {', '.join(sorted(need, key=order.index))})")
        if extra:
            raise PartitionError(f"partition_format '{self.pattern}' renders {' and '.join(extra)}, finer than or "
                                 f"beside grain {grain}")

    def render(self, start: date | datetime, grain: str, time_zone: str) -> str:
        """The string of the partition starting at ``start`` (a ``date``, or for hours an aware ``datetime``
        shown in ``time_zone``), as Spark's ``date_format`` renders it."""
        if isinstance(start, datetime):
            local = start.astimezone(zone(time_zone))
            offset = local.utcoffset() or timedelta(0)
        else:
            local, offset = datetime(start.year, start.month, start.day), timedelta(0)
        out = []
        for t in self.tokens:
            if isinstance(t, str):
                out.append(t)
            elif t.kind == "offset":
                out.append(_offset(t, offset))
            else:
                value = {"year": local.year, "month": local.month, "day": local.day, "hour": local.hour,
                         "minute": local.minute, "second": local.second}[t.kind]
                out.append(f"{value:0{t.width}d}")
        return "".join(out)

    def parse(self, value: str, grain: str, time_zone: str) -> date | datetime:
        """The start of the partition ``value`` names: a ``date``, or for hours a UTC ``datetime``; ``value``
        must be exactly what :meth:`render` gives for it (``2024-3-9`` is not a ``yyyy-MM-dd`` value).

        Raises
        ------
        PartitionError
            Naming ``value`` and the pattern.
        """
        start = self._read(value, grain, time_zone, strict=True)
        if start is None or self.render(start, grain, time_zone) != value:
            raise PartitionError(f"partition value '{value}' is not a {self.pattern} value")
        return start

    def loose_start(self, value: str, grain: str, time_zone: str) -> date | datetime | None:
        """The partition start ``value`` would name if it were written in this pattern with other digits widths
        or separators (``2024-3-9``, ``2024/03/09`` for ``yyyy-MM-dd``), or ``None``: how intake tells that a
        value the pattern does not parse still belongs to the range."""
        return self._read(value, grain, time_zone, strict=False)

    def _read(self, value: str, grain: str, time_zone: str, strict: bool) -> date | datetime | None:
        fields = [t for t in self.tokens if isinstance(t, _Field)]
        if strict:
            match = _regex(self.pattern).fullmatch(value)
            if match is None:
                return None
            groups = list(match.groups())
        else:
            numeric = [f for f in fields if f.kind != "offset"]
            if self.has_offset:
                value = _OFFSET_AT_END.sub("", value.strip())
            digits = re.findall(r"\d+", value)
            if len(digits) != len(numeric):
                joined = "".join(digits)
                widths = [4 if f.kind == "year" else 2 for f in numeric]
                if len(joined) != sum(widths):
                    return None
                digits, pos = [], 0
                for w in widths:
                    digits.append(joined[pos:pos + w])
                    pos += w
            groups = [digits.pop(0) if f.kind != "offset" else None for f in fields]
        parts = {"year": None, "month": None, "day": 1, "hour": 0, "minute": 0, "second": 0}
        offset = None
        for f, text in zip(fields, groups):
            if f.kind == "offset":
                offset = _read_offset(text) if text is not None else None
            else:
                parts[f.kind] = int(text)
        if (grain == "month" and parts["day"] != 1) or (grain == "hour" and (parts["minute"] or parts["second"])):
            return None  # not the start of a partition
        try:
            if grain != "hour":
                return date(parts["year"], parts["month"], parts["day"])
            local = datetime(parts["year"], parts["month"], parts["day"], parts["hour"], parts["minute"], parts["second"])
        except (TypeError, ValueError):
            return None
        if offset is not None:
            return local.replace(tzinfo=timezone(offset)).astimezone(timezone.utc)
        return local.replace(tzinfo=zone(time_zone)).astimezone(timezone.utc)  # fold 0: the first of a repeated hour


_OFFSET_AT_END = re.compile(r"(Z|[+-]\d{2}(:?\d{2})?)$")


def _offset(field: _Field, offset: timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    if field.letter == "X" and minutes == 0:
        return "Z"
    sign = "-" if minutes < 0 else "+"
    hh, mm = divmod(abs(minutes), 60)
    if field.letter == "Z":
        return f"{sign}{hh:02d}{mm:02d}"
    if field.width == 1:
        return f"{sign}{hh:02d}" + (f"{mm:02d}" if mm else "")
    return f"{sign}{hh:02d}{':' if field.width == 3 else ''}{mm:02d}"


def _read_offset(text: str) -> timedelta:
    if text == "Z":
        return timedelta(0)
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))


@lru_cache(maxsize=64)
def _compile(pattern: str) -> PartitionFormat:
    if not isinstance(pattern, str) or not pattern.strip():
        raise PartitionError("partition_format must be a non-empty Spark datetime pattern such as yyyy-MM-dd")
    tokens: list[_Field | str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = i + 1
            text = []
            while True:
                if end >= len(pattern):
                    raise PartitionError(f"partition_format '{pattern}' has an unclosed quote")
                if pattern[end] == "'":
                    if end + 1 < len(pattern) and pattern[end + 1] == "'":
                        text.append("'")
                        end += 2
                        continue
                    break
                text.append(pattern[end])
                end += 1
            tokens.append("'" if end == i + 1 else "".join(text))
            i = end + 1
            continue
        if ch.isalpha():
            run = len(pattern) - i - len(pattern[i:].lstrip(ch))
            if ch not in _LETTERS:
                raise PartitionError(f"partition_format '{pattern}': pattern letter '{ch}' is not supported for "
                                     f"partitions (supported: {_SUPPORTED}; quote literal text, e.g. 'T')")
            kind = _LETTERS[ch]
            ok = {"year": (4,), "month": (1, 2), "day": (1, 2), "hour": (1, 2), "minute": (2,), "second": (2,),
                  "offset": (1, 2, 3)}[kind]
            if run not in ok:
                raise PartitionError(f"partition_format '{pattern}': '{ch * run}' is not supported (use "
                                     f"{' or '.join(ch * n for n in ok)})")
            if any(isinstance(t, _Field) and t.kind == kind for t in tokens):
                raise PartitionError(f"partition_format '{pattern}' renders the {kind} twice")
            tokens.append(_Field(ch, run))
            i += run
            continue
        tokens.append(ch)
        i += 1
    merged: list[_Field | str] = []
    for t in tokens:  # adjacent literals as one
        if isinstance(t, str) and merged and isinstance(merged[-1], str):
            merged[-1] += t
        else:
            merged.append(t)
    return PartitionFormat(pattern, tuple(merged))


@lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern:
    parts = []
    for t in _compile(pattern).tokens:
        if isinstance(t, str):
            parts.append(re.escape(t))
        elif t.kind == "offset":
            parts.append(r"(Z|[+-]\d{2}(?::?\d{2})?)")
        else:
            parts.append(rf"(\d{{{t.width}}})" if t.width > 1 else r"(\d{1,2})")
    return re.compile("".join(parts))
