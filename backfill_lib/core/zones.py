"""Time zones by IANA name, refused with a :class:`~backfill_lib.core.errors.PartitionError` naming an unknown one."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from backfill_lib.core.errors import PartitionError


def zone(name: str) -> ZoneInfo:
    """Return the IANA zone ``name``; raise :class:`PartitionError` naming it when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise PartitionError(f"unknown time zone '{name}'") from exc
