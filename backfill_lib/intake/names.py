"""Column names of a request as the tables spell them, for a session that resolves names case-insensitively
(``spark.sql.caseSensitive`` off, Spark's default). Pure: takes the tables' column names.

Spark resolves ``event_date`` to a column ``EVENT_DATE`` in that mode, so a request may write either; the request is
then respelt once at intake, and the plan, its checks, messages and reports use the table's spelling only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backfill_lib.intake.request import BackfillRequest


def spelled(name: str, columns: Sequence[str]) -> str:
    """``name`` as ``columns`` spell it: itself when it is one of them, else the one column equal to it ignoring
    case, else ``name`` unchanged (intake then names it as missing)."""
    if name in columns:
        return name
    found = [c for c in columns if c.lower() == name.lower()]
    return found[0] if len(found) == 1 else name


def respell_request(request: BackfillRequest, target_columns: Sequence[str] | None,
                    tables: Mapping[str, Sequence[str]], table: str | None = None) -> BackfillRequest:
    """``request`` with every column name it gives spelt as its table spells it (:func:`spelled`), and its target
    named ``table`` when given (the catalog's spelling).

    ``target_columns`` are the target's columns (``None``: the target was not found, its names stay); they spell
    ``target.partition_column`` or ``target.partition_columns``, ``keys``, ``diff_gate.allowed_changed_columns``
    and the columns of ``metric_rules.N.metrics`` (which name the staged rows, in the target's columns).
    ``tables`` maps another table's name as the request writes it to its columns: they spell a
    ``reconciliation.N.source`` or ``metric_rules.N.source``'s ``partition_column`` and a mart's
    ``partition_column`` and ``keys``; a table missing from ``tables`` keeps its names.
    """
    data = request.model_dump(mode="python")
    if target_columns is not None:
        target = data["target"]
        if target.get("partition_columns"):
            target["partition_columns"] = {part: None if name is None else spelled(name, target_columns)
                                           for part, name in target["partition_columns"].items()}
            target.pop("partition_column", None)  # the parts' label, set again from the respelt parts
        else:
            target["partition_column"] = spelled(target["partition_column"], target_columns)
        data["keys"] = tuple(spelled(k, target_columns) for k in data["keys"])
        if data.get("diff_gate"):
            gate = data["diff_gate"]
            gate["allowed_changed_columns"] = tuple(spelled(c, target_columns) for c in gate["allowed_changed_columns"])
        for rule in data.get("metric_rules") or ():
            metrics = rule["metrics"]
            for kind in ("null_count", "nan_count", "sum", "min_max", "checksum"):
                metrics[kind] = tuple(spelled(c, target_columns) for c in metrics[kind])
    for field in ("reconciliation", "metric_rules"):
        for rule in data.get(field) or ():
            source = rule["source"]
            if source["table"] in tables:
                source["partition_column"] = spelled(source["partition_column"], tables[source["table"]])
    for mart in data.get("marts") or ():
        if mart["table"] in tables:
            columns = tables[mart["table"]]
            mart["partition_column"] = spelled(mart["partition_column"], columns)
            mart["keys"] = tuple(spelled(k, columns) for k in mart["keys"])
    if table is not None:
        data["target"]["table"] = table
    respelt = BackfillRequest.model_validate(data)
    return request if respelt == request else respelt
