"""Exact reconciliation metrics: one aggregation pass per side, compared per partition as decimals.

A :class:`MetricSpec` declares which metrics to compute; :func:`profile` computes all of them for every
partition of one DataFrame in a single ``groupBy(partition).agg(...)``; :func:`compare` turns the profiles of
the source and of the staged rows into one :class:`~backfill_lib.core.checks.Check` per partition and metric.

Metric names (the keys of a profile and the suffix of a check's name):

- ``row_count``: rows in the partition (``int``).
- ``null_count(c)``: rows where ``c`` is NULL (``int``).
- ``nan_count(c)``: rows where ``c`` is NaN; always 0 for columns that are not ``float`` or ``double`` (``int``).
- ``sum(c)``: for integer and decimal columns only, as ``decimal.Decimal`` (integers summed as
  ``decimal(38,0)`` so no overflow and no float); NULL (``None``) when every value is NULL.
- ``min(c)``, ``max(c)``: the Python value Spark returns for the column's type.
- ``checksum(a,b,...)``: the sum over rows of the NULL-aware row hash of ``a, b, ...``
  (:func:`~backfill_lib.adapters.checksums.row_hash`) as ``decimal(38,0)`` (``Decimal``):
  independent of row order, changed by any changed, added or removed row (up to hash collisions).
"""

from __future__ import annotations

import math
from decimal import Context, Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, DoubleType, FloatType

from backfill_lib.adapters.checksums import checksum_of
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partition_keys import PartitionKeys, keys_of
from backfill_lib.core.partitions import quote_ident
from backfill_lib.intake.rule_checks import check_columns, name_fold
from backfill_lib.intake.rules import MetricSpec, checksum_name

# Python's default decimal context keeps 28 significant digits; decimal(38,x) sums and checksums have more, and
# a subtraction rounded to 28 digits would hide a difference of 1. 100 digits is exact for every Spark decimal.
_EXACT = Context(prec=100)


def _col(name: str) -> Column:
    """Column ``name``, quoted: a name may hold a dot (it is not a struct field)."""
    return F.col(quote_ident(name))


def _aggregates(df: DataFrame, spec: MetricSpec) -> list[Column]:
    fold = name_fold()  # a metric's column may be spelt in another case, as Spark resolves it
    types = {fold(f.name): f.dataType for f in df.schema.fields}
    aggs = [F.count(F.lit(1)).alias("row_count")] if spec.row_count else []
    aggs += [F.count_if(_col(c).isNull()).alias(f"null_count({c})") for c in spec.null_count]
    for c in spec.nan_count:
        # isnan on a non-float column would cast it to double; NaN cannot occur there, so count 0.
        is_float = isinstance(types[fold(c)], (FloatType, DoubleType))
        aggs.append((F.count_if(F.isnan(_col(c))) if is_float else F.lit(0)).alias(f"nan_count({c})"))
    for c in spec.sum:
        exact = _col(c) if isinstance(types[fold(c)], DecimalType) else _col(c).cast("decimal(38,0)")
        aggs.append(F.sum(exact).alias(f"sum({c})"))
    for c in spec.min_max:
        aggs += [F.min(_col(c)).alias(f"min({c})"), F.max(_col(c)).alias(f"max({c})")]
    if spec.checksum:
        aggs.append(checksum_of(df, spec.checksum).alias(checksum_name(spec.checksum)))
    return aggs


def profile_frame(df: DataFrame, partition_column: str | PartitionKeys, spec: MetricSpec, *, at: str = "metrics") -> DataFrame:
    """The single aggregation behind :func:`profile`: one row per partition value.

    Returns
    -------
    DataFrame
        Column ``partition`` (string: dates as ``YYYY-MM-DD``, hours as an ISO 8601 instant, see
        :meth:`PartitionKeys.expr`) and one column per name of ``spec.names()``.

    Raises
    ------
    IntakeError
        See :func:`check_columns`; also when ``partition_column`` is missing.
    """
    keys = keys_of(partition_column)
    fold = name_fold()
    for column in keys.columns:
        if fold(column) not in {fold(c) for c in df.columns}:
            raise IntakeError(f"{at}: partition column '{column}' does not exist")
    check_columns(df.schema, spec, at)
    # count(1) keeps the aggregation non-empty when the spec asks for nothing but grouping.
    aggs = _aggregates(df, spec) or [F.count(F.lit(1)).alias("_rows")]
    return df.groupBy(keys.expr().alias("partition")).agg(*aggs)


def profile_aggregates(df: DataFrame, partition_column: str | PartitionKeys, spec: MetricSpec, *,
                       at: str = "metrics") -> tuple[list[Column], list[str]]:
    """The aggregate columns of :func:`profile_frame` and the names to read them under, for an aggregation
    shared with other audits (:class:`~backfill_lib.validate.shared_pass.SharedPass`); read the rows back with
    :func:`profile_of`. Raises as :func:`profile_frame`."""
    keys = keys_of(partition_column)
    fold = name_fold()
    for column in keys.columns:
        if fold(column) not in {fold(c) for c in df.columns}:
            raise IntakeError(f"{at}: partition column '{column}' does not exist")
    check_columns(df.schema, spec, at)
    aggs = _aggregates(df, spec)
    if not aggs:  # nothing but grouping: a row count keeps the partition's row
        return [F.count(F.lit(1))], ["_rows"]
    return aggs, spec.names()  # spec.names() lists the metrics in _aggregates' order


def profile_of(rows: list[dict], partition_column: str | PartitionKeys, spec: MetricSpec) -> dict[str, dict[str, object]]:
    """:func:`profile`'s result from the rows of a shared aggregation (``{"p": partition value, name: value}``)."""
    names = spec.names()
    return keys_of(partition_column).rekey({r["p"]: {n: r[n] for n in names} for r in rows})


def profile(
    df: DataFrame, partition_column: str | PartitionKeys, spec: MetricSpec, *, at: str = "metrics"
) -> dict[str, dict[str, object]]:
    """All metrics of ``spec`` for every partition of ``df``, in one aggregation (one scan of ``df``).

    Parameters
    ----------
    df : DataFrame
        The rows of one side (source or staged), already restricted to the partitions to compare.
    partition_column : str
        Column grouped by, or its :class:`PartitionKeys`; results are keyed as the plan keys partitions
        (a bare name is a ``DATE`` column keyed ``YYYY-MM-DD``).
    spec : MetricSpec
    at : str
        What ``df`` is (a table name, "staged rows"), to start error messages with.

    Returns
    -------
    dict
        ``{partition: {metric name: value}}``; value types are listed in the module docstring. Partitions
        without rows are absent (see :func:`empty_profile`). NULL partition values are keyed ``None``.

    Raises
    ------
    IntakeError
        A named column is missing, or a ``sum`` column is not integer or decimal (message names it).
    """
    names = spec.names()
    rows = profile_frame(df, partition_column, spec, at=at).collect()
    return keys_of(partition_column).rekey({r["partition"]: {n: r[n] for n in names} for r in rows})


def empty_profile(spec: MetricSpec) -> dict[str, object]:
    """The metrics of a partition with no rows: counts 0; sums, min, max and checksum NULL (``None``)."""
    return {n: 0 if n == "row_count" or n.startswith(("null_count(", "nan_count(")) else None for n in spec.names()}


def difference(staged: object, source: object) -> Decimal | None:
    """``staged - source`` exactly as a Decimal, or ``None`` when either is not a finite number.

    Integers, decimals and finite floats are numbers (a float through its shortest repr); ``bool``, dates,
    strings, NaN, infinities and ``None`` are not and compare by equality only.
    """

    def number(v: object) -> Decimal | None:
        if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
            return None
        if isinstance(v, float) and not math.isfinite(v):
            return None
        d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
        return d if d.is_finite() else None

    a, b = number(staged), number(source)
    return None if a is None or b is None else _EXACT.subtract(a, b)


def _same(staged: object, source: object) -> bool:
    # NaN != NaN in Python; for reconciliation two NaN minima are the same value.
    both_nan = all(isinstance(v, float) and math.isnan(v) for v in (staged, source))
    return both_nan or staged == source


def matches(staged: object, source: object, tolerance: Decimal | float | int = 0) -> tuple[bool, Decimal | None]:
    """The one comparison rule of reconciliation: whether ``staged`` matches ``source``, and their exact
    :func:`difference` (``None`` when either is not a finite number).

    Numbers (integers and decimals exactly, floats through their shortest repr) match when
    ``|staged - source| <= tolerance``; anything else (NULL, NaN, dates, strings) only when equal, two NaN
    being equal and NULL equal only to NULL.
    """
    diff = difference(staged, source)
    if diff is None:
        return _same(staged, source), None
    limit = tolerance if isinstance(tolerance, Decimal) else Decimal(repr(tolerance))
    return abs(diff) <= limit, diff


def _text(value: object) -> str | None:
    if value is None:
        return None
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def _shown(value: object) -> str:
    return "NULL" if value is None else _text(value)


def compare(
    source: dict[str, dict[str, object]],
    staged: dict[str, dict[str, object]],
    spec: MetricSpec,
    partitions: list[str],
    rule_name: str,
    batch: int | None = None,
) -> list[Check]:
    """One reconciliation check per partition and metric: the staged value against the source value.

    Parameters
    ----------
    source, staged : dict
        Profiles from :func:`profile`. A partition missing from one is compared as :func:`empty_profile`.
    spec : MetricSpec
        The spec both profiles were computed with; ``spec.tolerance`` bounds ``|staged - source|``.
    partitions : list of str
        The partition keys to check, in order.
    rule_name : str
        Prefix of each check's name: ``f"{rule_name}.{metric}"``, e.g. ``"amounts.sum(amount)"``.
    batch : int, optional
        Recorded on every check.

    Returns
    -------
    list of Check
        ``kind="reconciliation"``, ``observed`` = staged value and ``expected`` = source value as strings
        (``None`` for NULL). Numbers pass when ``|staged - source| <= tolerance`` (exact Decimal arithmetic;
        the checksum is always exact); other values, NULL and NaN pass only when equal.
    """
    empty = empty_profile(spec)
    checks = []
    for key in partitions:
        s, t = staged.get(key, empty), source.get(key, empty)
        for name in spec.names():
            a, b = s[name], t[name]
            ok, diff = matches(a, b, 0 if name.startswith("checksum(") else spec.tolerance)
            message = None
            if not ok:
                message = f"staged {name} = {_shown(a)}, source = {_shown(b)}"
                if diff is not None:
                    message += f", difference {format(diff, 'f')}"
            checks.append(Check("reconciliation", f"{rule_name}.{name}", ok, key, batch, _text(a), _text(b), message))
    return checks
