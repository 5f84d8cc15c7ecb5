"""The one row hash and row checksum, over canonical forms of every column type.

:func:`row_hash` is the 64-bit ``xxhash64`` of a row's columns in a canonical, NULL-aware form
(:func:`canonical_sql`): two rows hash alike exactly when their values are alike (up to hash collisions), where
``xxhash64`` alone would hash ``(NULL, 'x')`` like ``('x', NULL)`` (it skips NULLs), ``0.0`` like ``-0.0``, and
refuses ``MAP`` and ``VARIANT`` values. The diff by key compares rows and columns by it, and :func:`checksum_of`
sums it: staging's fingerprints, the publishing write's observation, the post-publish check and the ``checksum``
metric all use :func:`checksum_of`, so two sides hashed here agree exactly when their rows do, in any row order
or file layout; the post-publish check compares the staged fingerprints with the write's observation and would
silently fall back to reading the data if the two expressions differed.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, DataType, DoubleType, FloatType, MapType, NullType, StructType,
                               VariantType)

from backfill_lib.core.partitions import quote_ident


def canonical_sql(expr: str, data_type: DataType, depth: int = 0, *, signed_zeros: bool = True) -> str:
    """SQL of the value of ``expr`` (of ``data_type``) in a form ``xxhash64`` can hash, alike for two values
    exactly when they are alike:

    - ``MAP``: its entries sorted by key, each ``(key, value IS NULL, value)`` in canonical form (two maps with
      the same entries in another order are alike);
    - ``STRUCT``: each field as ``(field IS NULL, field)``; ``ARRAY``: each element as ``(element IS NULL,
      element)``, in order (so a NULL field or element is told from its neighbours and from an empty value);
    - ``VARIANT``: its JSON text (object fields in key order, as Spark stores them);
    - ``FLOAT``/``DOUBLE``: the value with the sign of a zero (``0.0`` and ``-0.0`` differ, as the bits written
      do; every NaN is alike);
    - every other type (numbers, strings, ``BINARY``, dates, ``TIMESTAMP``, ``TIMESTAMP_NTZ``): the value itself.

    Nested types are handled at any depth (``depth`` names the lambda variables apart). ``expr`` itself may be
    NULL: callers tag it (see :func:`hash_args`). Every canonical form is orderable, so it can also be grouped,
    sorted and compared with set operations, which a ``MAP`` or ``VARIANT`` cannot. With ``signed_zeros=False``
    a ``FLOAT``/``DOUBLE`` is the value itself (``xxhash64`` then hashes ``0.0`` like ``-0.0``, as grouping and
    joins hold them alike: see :func:`key_hash`).
    """
    e = f"e{depth}"
    if isinstance(data_type, MapType):
        entry = (f"struct({canonical_sql(f'{e}.key', data_type.keyType, depth + 1, signed_zeros=signed_zeros)}, "
                 f"{_tagged_sql(f'{e}.value', data_type.valueType, depth + 1, signed_zeros)})")
        # Keys are unique within a map, so the entries' natural order is their keys' order.
        return f"array_sort(transform(map_entries({expr}), {e} -> {entry}))"
    if isinstance(data_type, StructType):
        if not data_type.fields:
            return "0"
        return "struct(" + ", ".join(_tagged_sql(f"{expr}.{quote_ident(f.name)}", f.dataType, depth, signed_zeros)
                                     for f in data_type.fields) + ")"
    if isinstance(data_type, ArrayType):
        return f"transform({expr}, {e} -> struct({_tagged_sql(e, data_type.elementType, depth + 1, signed_zeros)}))"
    if isinstance(data_type, VariantType):
        return f"to_json({expr})"
    if isinstance(data_type, (FloatType, DoubleType)) and signed_zeros:
        # xxhash64 hashes -0.0 as 0.0; the text of a zero carries its sign (only zeros are cast).
        return f"struct({expr}, CASE WHEN {expr} = 0 THEN startswith(CAST({expr} AS STRING), '-') END)"
    return expr


def _tagged_sql(expr: str, data_type: DataType, depth: int, signed_zeros: bool = True) -> str:
    return f"{expr} IS NULL, {canonical_sql(expr, data_type, depth, signed_zeros=signed_zeros)}"


def is_plain(data_type: DataType) -> bool:
    """Whether values of ``data_type`` compare (``<=>``) exactly as their canonical forms do: an atomic type
    other than ``FLOAT``, ``DOUBLE`` and ``VARIANT``."""
    return not isinstance(data_type, (MapType, StructType, ArrayType, VariantType, FloatType, DoubleType))


def canonical(col: str, data_type: DataType, *, signed_zeros: bool = True) -> Column:
    """The column named ``col`` (quoted here: a name may hold a dot) in :func:`canonical_sql` form."""
    return F.expr(canonical_sql(quote_ident(col), data_type, signed_zeros=signed_zeros))


def comparable(df: DataFrame) -> DataFrame:
    """``df`` with every column that is not :func:`is_plain` replaced by its :func:`canonical` form (same name,
    same position): rows that set operations (``exceptAll``) compare as their values compare, where a ``MAP`` or
    ``VARIANT`` column would be refused and ``0.0`` would equal ``-0.0``."""
    return df.select(*[F.col(quote_ident(f.name)) if is_plain(f.dataType) else canonical(f.name, f.dataType).alias(f.name)
                       for f in df.schema.fields])


def hash_args(df: DataFrame, columns: Iterable[str], *, signed_zeros: bool = True) -> list[Column]:
    """The arguments of :func:`row_hash` (of :func:`key_hash` with ``signed_zeros=False``): per column of ``df``
    (in the order given, each quoted: a name may hold a dot), ``column IS NULL`` and its :func:`canonical` form."""
    types = {f.name: f.dataType for f in df.schema.fields}
    folded = {f.name.lower(): f.dataType for f in df.schema.fields}  # Spark resolves names case-insensitively
    # a name of no column is left to Spark, which refuses it naming the column
    return [c for name in columns for c in (
        F.col(quote_ident(name)).isNull(),
        canonical(name, types.get(name, folded.get(name.lower(), NullType())), signed_zeros=signed_zeros))]


def row_hash(df: DataFrame, columns: Iterable[str]) -> Column:
    """The ``bigint`` ``xxhash64`` of ``columns`` of ``df`` in canonical, NULL-aware form (see :func:`canonical_sql`);
    a constant over no columns."""
    args = hash_args(df, columns)
    return F.xxhash64(*args) if args else F.lit(0).cast("bigint")


def key_hash(df: DataFrame, columns: Iterable[str]) -> Column:
    """The ``bigint`` ``xxhash64`` of key ``columns`` of ``df``, NULL-aware as :func:`row_hash` is (``(2, NULL)``
    and ``(NULL, 2)`` hash apart, as do NULL fields and elements in their places) but alike for keys that Spark
    groups and joins as one: ``0.0`` and ``-0.0`` (grouping normalizes a float key, so its rows and its group must
    hash alike); a constant over no columns. Raises nothing: Spark refuses a name of no column when it is used."""
    args = hash_args(df, columns, signed_zeros=False)
    return F.xxhash64(*args) if args else F.lit(0).cast("bigint")


def checksum_of(df: DataFrame, columns: Iterable[str]) -> Column:
    """The aggregate ``sum(row_hash(columns))`` over rows of ``df`` as ``decimal(38,0)`` (no overflow, no
    float), ``columns`` in the order given; NULL over no rows."""
    return F.sum(row_hash(df, columns).cast("decimal(38,0)"))


def row_checksum(df: DataFrame) -> Column:
    """:func:`checksum_of` every column of ``df`` in name order: what a whole row's fingerprint means."""
    return checksum_of(df, sorted(df.columns))
