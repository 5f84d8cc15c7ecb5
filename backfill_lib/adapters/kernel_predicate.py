"""Catalyst filter conditions translated into Delta Kernel predicates, for :mod:`.kernel_scan`.

A translation is only ever weaker than the condition (a conjunct that does not translate is left out), never
stronger: Kernel then keeps more files than Spark would, never fewer.
"""

from __future__ import annotations

from datetime import date

from backfill_lib.adapters.jvm_plan import scala_list

#: Catalyst comparisons and the Kernel predicate of each; the second name is the comparison with its sides swapped.
COMPARISONS = {"EqualTo": ("=", "="), "LessThan": ("<", ">"), "LessThanOrEqual": ("<=", ">="),
               "GreaterThan": (">", "<"), "GreaterThanOrEqual": (">=", "<=")}

#: Most values of an ``IN`` list translated (as an OR of equalities); a longer list is left out.
MAX_IN_VALUES = 200

#: 1583-01-01 in days since the epoch (proleptic Gregorian, as Spark counts): before it Java's hybrid
#: Julian/Gregorian calendar, which parts of Kernel may use to read a date or timestamp, names other days.
FIRST_GREGORIAN_DAY = (date(1583, 1, 1) - date(1970, 1, 1)).days
FIRST_GREGORIAN_MICROS = FIRST_GREGORIAN_DAY * 86_400_000_000


def conjunction(jvm, predicates: list):
    """The Kernel AND of ``predicates``; ``None`` when there are none."""
    if not predicates:
        return None
    kernel = jvm.io.delta.kernel.expressions
    result = predicates[0]
    for p in predicates[1:]:
        result = kernel.Predicate("AND", result, p)
    return result


def predicate(jvm, expr, attributes: dict, strict: bool = False):
    """The Kernel predicate of Catalyst ``expr`` on the relation's columns (``attributes``: exprId to name), or
    ``None`` when it has none. Not ``strict``: a conjunct without one is left out (a weaker predicate, so Kernel
    keeps a superset of the files); ``strict`` (under NOT or OR): the whole expression must translate."""
    kernel = jvm.io.delta.kernel.expressions
    kind = expr.getClass().getSimpleName()
    if kind == "And":
        left = predicate(jvm, expr.left(), attributes, strict)
        right = predicate(jvm, expr.right(), attributes, strict)
        if strict and (left is None or right is None):
            return None
        return conjunction(jvm, [p for p in (left, right) if p is not None])
    if kind == "Or":
        left = predicate(jvm, expr.left(), attributes, True)
        right = predicate(jvm, expr.right(), attributes, True)
        return None if left is None or right is None else kernel.Predicate("OR", left, right)
    if kind == "Not":
        child = predicate(jvm, expr.child(), attributes, True)
        return None if child is None else kernel.Predicate("NOT", child)
    if kind in ("IsNull", "IsNotNull"):
        column = _column(jvm, expr.child(), attributes)
        return None if column is None else kernel.Predicate("IS_NULL" if kind == "IsNull" else "IS_NOT_NULL", column)
    if kind in COMPARISONS:
        name, swapped = COMPARISONS[kind]
        column, value = _column(jvm, expr.left(), attributes), _literal(jvm, expr.right())
        if column is None or value is None:
            column, value, name = _column(jvm, expr.right(), attributes), _literal(jvm, expr.left()), swapped
        return None if column is None or value is None else kernel.Predicate(name, column, value)
    if kind == "In":
        return _any_equal(jvm, _column(jvm, expr.value(), attributes),
                          [_literal(jvm, v) for v in scala_list(expr.list(), MAX_IN_VALUES + 1)])
    if kind == "InSet":  # an IN list longer than spark.sql.optimizer.inSetConversionThreshold: Catalyst's values
        data_type = expr.child().dataType()
        return _any_equal(jvm, _column(jvm, expr.child(), attributes),
                          [_value(jvm, v, data_type) for v in scala_list(expr.hset(), MAX_IN_VALUES + 1)])
    return None


def _any_equal(jvm, column, literals: list):
    """``column = v1 OR column = v2 ...``; ``None`` without a column, without values, past
    :data:`MAX_IN_VALUES` or when a value did not translate (a NULL among them)."""
    if column is None or not literals or len(literals) > MAX_IN_VALUES or any(v is None for v in literals):
        return None
    kernel = jvm.io.delta.kernel.expressions
    result = kernel.Predicate("=", column, literals[0])
    for value in literals[1:]:
        result = kernel.Predicate("OR", result, kernel.Predicate("=", column, value))
    return result


def _column(jvm, expr, attributes: dict):
    """A Kernel column for an attribute of the relation; ``None`` for any other expression (a cast, a function)."""
    if expr.getClass().getSimpleName() != "AttributeReference":
        return None
    name = attributes.get(expr.exprId().id())
    return None if name is None else jvm.io.delta.kernel.expressions.Column(name)


def _literal(jvm, expr):
    """A Kernel literal of a non-NULL Catalyst ``Literal``; else ``None`` (see :func:`_value`)."""
    if expr.getClass().getSimpleName() != "Literal":
        return None
    return _value(jvm, expr.value(), expr.dataType())


def _value(jvm, value, data_type):
    """A Kernel literal of a Catalyst internal ``value`` of ``data_type`` (days since the epoch for a date,
    microseconds since the epoch for a timestamp, ``UTF8String`` for a string); ``None`` for NULL, for a type
    Kernel may not compare as Spark does, and for a date or timestamp before :data:`FIRST_GREGORIAN_DAY`."""
    if value is None:
        return None
    literal, kind = jvm.io.delta.kernel.expressions.Literal, data_type.typeName()
    if kind == "date":
        return literal.ofDate(int(value)) if int(value) >= FIRST_GREGORIAN_DAY else None
    if kind in ("timestamp", "timestamp_ntz"):
        if int(value) < FIRST_GREGORIAN_MICROS:
            return None
        return literal.ofTimestamp(int(value)) if kind == "timestamp" else literal.ofTimestampNtz(int(value))
    if kind == "integer":
        return literal.ofInt(int(value))
    if kind == "long":
        return literal.ofLong(int(value))
    if kind == "string" and data_type.toString() == "StringType":  # the binary collation only
        return literal.ofString(str(value.toString()))
    if kind == "boolean":
        return literal.ofBoolean(bool(value))
    return None
