"""Rule models of a request that need no Spark: the diff gate and the metric spec (pure)."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field


class DiffGate(BaseModel):
    """Thresholds on the diff of each partition; ``None`` means no limit.

    Parameters
    ----------
    max_deleted, max_inserted : int, optional
        Most keys (rows) a partition may lose or gain.
    max_updated_fraction : float, optional
        Most updated rows as a fraction (0 to 1, inclusive) of the partition's rows before the backfill.
    allowed_changed_columns : tuple of str
        The columns the backfill is meant to correct.
    max_updated_fraction_outside : float, optional
        Most rows, as a fraction of rows before, updated in any column not in ``allowed_changed_columns``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_deleted: int | None = Field(default=None, ge=0)
    max_inserted: int | None = Field(default=None, ge=0)
    max_updated_fraction: float | None = Field(default=None, ge=0, le=1)
    allowed_changed_columns: tuple[str, ...] = ()
    max_updated_fraction_outside: float | None = Field(default=None, ge=0, le=1)


class MetricSpec(BaseModel):
    """Which metrics to compute per partition, and the tolerance of their comparison.

    Parameters
    ----------
    row_count : bool
        Count rows (default ``True``).
    null_count, nan_count, sum, min_max : tuple of str
        Column names. ``sum`` takes integer and decimal columns only; ``min_max`` yields ``min(c)`` and
        ``max(c)``.
    checksum : tuple of str
        Columns hashed together into one order-independent checksum; empty means no checksum.
    tolerance : Decimal
        Largest absolute difference (in the metric's own unit: rows, or the column's unit) that still
        passes; default 0 (exact). It never applies to the checksum, which is always exact.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    row_count: bool = True
    null_count: tuple[str, ...] = ()
    nan_count: tuple[str, ...] = ()
    sum: tuple[str, ...] = ()
    min_max: tuple[str, ...] = ()
    checksum: tuple[str, ...] = ()
    tolerance: Decimal = Field(default=Decimal(0), ge=0)

    def names(self) -> list[str]:
        """The metric names this spec produces, in a fixed order (see the module docstring)."""
        names = ["row_count"] if self.row_count else []
        names += [f"null_count({c})" for c in self.null_count]
        names += [f"nan_count({c})" for c in self.nan_count]
        names += [f"sum({c})" for c in self.sum]
        for c in self.min_max:
            names += [f"min({c})", f"max({c})"]
        if self.checksum:
            names.append(checksum_name(self.checksum))
        return names


def checksum_name(columns: tuple[str, ...]) -> str:
    return f"checksum({','.join(columns)})"
