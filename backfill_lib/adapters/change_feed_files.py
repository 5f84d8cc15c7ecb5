"""The files a batch read of a Delta table's Change Data Feed reads, from the commits of its version range.

Spark plans ``table_changes('t', 1, 3)`` (or ``readChangeFeed``) as a ``LogicalRelation`` over Delta's
``DeltaCDFRelation``, not as a file scan: ``DataFrame.inputFiles()`` lists nothing for it, so the query looked
like 0 files. Delta's reader (``CDCReader.changesToDF``) reads, for each commit of the range, its ``cdc`` files
when it has any, else its ``add`` and ``remove`` files with ``dataChange``; the same choice is made here, from
the same commit files (Delta's own listing, ``DeltaLog.getChangeLogFiles``, read through its ``LogStore``), in
the driver and without a Spark job. The figure is never below Spark's: a filter on the change rows (a partition
of the table) prunes nothing here, and the files of a MERGE that changed no row, which Delta skips, count.
"""

from __future__ import annotations

import json

from backfill_lib.adapters.jvm_plan import is_a, scala_list

#: Delta's base class of the change feed's relation (its empty variant is an anonymous subclass).
CHANGE_FEED_RELATION = "org.apache.spark.sql.delta.commands.cdc.DeltaCDFRelationBase"


def is_change_feed(relation) -> bool:
    """Whether ``relation`` (a JVM ``BaseRelation``) is Delta's change feed relation."""
    return is_a(relation.getClass(), CHANGE_FEED_RELATION)


def change_feed_files(relation) -> dict[tuple[str, str], int] | None:
    """``{(table root, path as the log writes it): size in bytes}`` of the files the change feed ``relation``
    reads: those of each commit from its starting version to its ending version (the table's latest version,
    as Delta resolved it for the query, when none is given or a later one is).

    Returns ``None`` when the relation has no starting version (Delta's empty relation for a range past the
    latest version: nothing to tell it from another shape) or a ``remove`` it reads has no ``size``. Raises what
    py4j raises when Delta's internals differ or a commit file is gone (Spark's read would fail on it too)."""
    start = relation.startingVersion()
    if start.isEmpty():
        return None
    latest = int(relation.latestVersionOfTableDuringAnalysis())
    end = relation.endingVersion()
    end = latest if end.isEmpty() else min(int(end.get()), latest)
    delta_log = relation.deltaLog()
    root = str(delta_log.dataPath().toString())
    store, conf = delta_log.store(), delta_log.newDeltaHadoopConf()
    # failOnDataLoss: a missing commit between start and end raises, as Delta's read of the range does
    commits = delta_log.getChangeLogFiles(int(start.get()), end, relation.catalogTableOpt(), True)
    found: dict[tuple[str, str], int] = {}
    while commits.hasNext():
        text = store.read(commits.next()._2(), conf).mkString("\n")  # one py4j call a commit, not a line
        files = commit_files(text)
        if files is None:
            return None
        found.update({(root, path): size for path, size in files.items()})
    return found


def commit_files(text: str) -> dict[str, int] | None:
    """``{path: size}`` of the files Delta's change feed reads of one commit (its JSON text, an action a line):
    its ``cdc`` files if it has any, else its ``add`` and ``remove`` files with ``dataChange``; ``None`` when
    such a ``remove`` has no ``size`` (optional in the protocol). Pure.

    Examples
    --------
    >>> commit_files('{"add": {"path": "a", "size": 5, "dataChange": true}}\\n{"cdc": {"path": "c", "size": 2}}')
    {'c': 2}
    >>> commit_files('{"remove": {"path": "a", "size": 5, "dataChange": true}}\\n{"commitInfo": {}}')
    {'a': 5}
    """
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    changes = {a["cdc"]["path"]: int(a["cdc"]["size"]) for a in actions if "cdc" in a}
    if changes:
        return changes
    files: dict[str, int] = {}
    for action in actions:
        file = action.get("add") or action.get("remove")
        if file is None or not file.get("dataChange", True):  # a remove's dataChange defaults to true
            continue
        if file.get("size") is None:
            return None
        files[file["path"]] = int(file["size"])  # a deletion vector's remove and add name one file: once
    return files


def open_change_feeds(df) -> list[tuple[str, int, int]]:
    """``(table, starting version, latest version)`` of each change feed ``df``'s analysed plan (views and
    subqueries included) reads up to the table's latest version at analysis: no ending version, or one past the
    latest (Delta reads up to the latest then). Such a read
    changes with every commit, and ``VERSION AS OF`` pinning cannot reach a table named inside
    ``table_changes(...)``. ``[]`` without a JVM plan (Spark Connect)."""
    jdf = getattr(df, "_jdf", None)
    found, stack = [], [] if jdf is None else [jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() == "LogicalRelation" and is_change_feed(node.relation()):
            relation = node.relation()
            latest, end = int(relation.latestVersionOfTableDuringAnalysis()), relation.endingVersion()
            if end.isEmpty() or int(end.get()) > latest:
                table = relation.catalogTableOpt()
                name = (table.get().identifier().unquotedString() if table.isDefined()
                        else str(relation.deltaLog().dataPath().toString()))
                start = relation.startingVersion()
                found.append((name, 0 if start.isEmpty() else int(start.get()), latest))
            continue
        for plans in (node.children(), node.innerChildren(), node.subqueries()):
            stack.extend(scala_list(plans))
    return found
