"""Small helpers for walking Spark's JVM plans and Scala collections through py4j (classic PySpark only)."""

from __future__ import annotations


def scala_list(collection, most: int | None = None) -> list:
    """The elements of a Scala collection (up to ``most`` of them), through py4j."""
    out, it = [], collection.iterator()
    while it.hasNext() and (most is None or len(out) < most):
        out.append(it.next())
    return out


def is_a(kind, name: str) -> bool:
    """Whether the JVM class ``kind`` is the class ``name`` or extends it (by name: Delta's classes come from
    another class loader than py4j's)."""
    while kind is not None:
        if kind.getName() == name:
            return True
        kind = kind.getSuperclass()
    return False
