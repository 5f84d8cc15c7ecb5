"""The files a query reads from Delta tables, found by Delta Kernel in the driver, without a Spark job.

``DataFrame.inputFiles()`` runs Delta's scan planning (``PrepareDeltaScan``), which builds each source table's
state in a Spark job before pruning it: 3.9 s of the demo's 10 s dry run on 2 cores. Here the query is optimised
without that rule (in a clone of the session, so no other thread's query is affected), and each Delta relation
of the optimised plan is listed by Kernel at the version Spark analysed it at, with the filters Spark pushed
down to it translated into a Kernel predicate: Kernel prunes partitions and skips files by their statistics as
Delta does. A filter that cannot be translated is left out of the predicate (Kernel then keeps more files, never
fewer), and so are the conditions above a nondeterministic filter or projection, which Spark does not push
down either. A read of a Delta table's Change Data Feed (``table_changes``) counts the files of the commits of
its range (:mod:`~.change_feed_files`). Any other relation (Parquet files, a Hive table, a cached or RDD
relation), or more than :data:`~.kernel_log.MAX_FILES` files listed, makes the whole answer ``None`` (never a
count of part of the query), and the caller asks Spark.
"""

from __future__ import annotations

import json
import logging
import re

from pyspark.sql import DataFrame, SparkSession

from backfill_lib.adapters import kernel_log
from backfill_lib.adapters.change_feed_files import change_feed_files, is_change_feed
from backfill_lib.adapters.delta_log import partition_value_key
from backfill_lib.adapters.jvm_plan import scala_list
from backfill_lib.adapters.kernel_predicate import conjunction, predicate

log = logging.getLogger(__name__)

#: Delta's optimizer rule that lists a scan's files (a Spark job), left out of the plan read here.
PREPARE_DELTA_SCAN = "org.apache.spark.sql.delta.stats.PrepareDeltaScan"

#: Leaves that read no file (``inputFiles()`` has nothing for them either).
FILELESS_LEAVES = {"LocalRelation", "OneRowRelation", "Range"}

#: A TIMESTAMP partition value that names its instant: Delta's UTC form ("2024-03-10T06:00:00.000000Z") or one
#: with an offset. Without a zone ("2024-03-10 01:00:00", as written under
#: ``spark.databricks.delta.write.utcTimestampPartitionValues=false``) Spark reads it in the session's time zone,
#: which Kernel does not know.
ZONED_VALUE = re.compile(r"(Z|[+-]\d\d(:?\d\d)?)$")


def kernel_input_files(spark: SparkSession, df: DataFrame) -> tuple[int, int] | None:
    """``(files, bytes)``: the data files ``df`` reads from Delta tables after partition pruning and data skipping
    (as Kernel finds them at each table's analysed version) and from their change feeds (the files of the commits a
    ``table_changes`` read covers, :func:`~.change_feed_files.change_feed_files`, not counted against the file
    limit), and the sum of their ``size`` (bytes, from the log); a file read twice counts once. ``None`` (nothing
    raised) under Spark Connect, when a relation of the plan is neither a Delta table Kernel reads nor a change feed
    sized from its commits, when Kernel would list more than :data:`~.kernel_log.MAX_FILES` files in all (the
    driver's replay is then the slower), or when Kernel or Spark's internals refuse."""
    jvm = spark.sparkContext._jvm if hasattr(spark, "_jsparkSession") else None
    if jvm is None:
        return None
    try:
        relations = _delta_scans(spark, df)
        if relations is None:
            return None
        scans, feeds = relations
        found: dict[tuple[str, str], int] = {}
        for feed in feeds:
            files = change_feed_files(feed)
            if files is None:
                return None
            found.update(files)
        budget = kernel_log.MAX_FILES  # read here, not imported: a test lowers it
        for snapshot, conditions, attributes in scans:
            lines = _scan_lines(spark, snapshot, conditions, attributes, budget)
            if lines is None:
                log.debug("Kernel would list more than %d files: Spark sizes the input", kernel_log.MAX_FILES)
                return None
            budget -= len(lines)
            root = str(snapshot.deltaLog().dataPath().toString())
            for line in lines:
                add = json.loads(line)["add"]
                found[(root, add["path"])] = int(add["size"])
    except Exception as exc:  # Spark's or Kernel's internals changed shape: Spark's own answer
        log.debug("Kernel did not list the query's files: %s",
                  (str(exc).strip().splitlines() or [type(exc).__name__])[0])
        return None
    return len(found), sum(found.values())


def _scan_lines(spark: SparkSession, snapshot, conditions: list, attributes: dict, limit: int) -> list[str] | None:
    """The scan files (``{"add": {...}}`` JSON, no stats) Kernel keeps of ``snapshot`` under ``conditions``;
    ``None`` when there are more than ``limit``. A TIMESTAMP partition column the conditions name, with a value
    that names no zone, is left out of the predicate: Kernel would read that value in another zone than Spark's
    session does (checking it costs a second listing, so only for such a column)."""
    jvm = spark.sparkContext._jvm
    found = _predicate(jvm, conditions, attributes)
    referenced = {attributes.get(a.exprId().id()) for c in conditions for a in scala_list(c.references())}
    timestamps = {name: key for name, key in _timestamp_partition_keys(snapshot).items() if name in referenced} \
        if found is not None else {}
    if timestamps:
        # every file's values, not only the ones the predicate keeps: a file it wrongly drops is the defect
        everything = kernel_log.scan_file_lines(spark, snapshot, None, stats=False, limit=limit)
        if everything is None:
            return None
        values = [json.loads(line)["add"].get("partitionValues") or {} for line in everything]
        zoneless = {name for name, key in timestamps.items()
                    if any(v.get(key) is not None and not ZONED_VALUE.search(v[key]) for v in values)}
        if zoneless:
            kept = {i: name for i, name in attributes.items() if name not in zoneless}
            found = _predicate(jvm, conditions, kept)
            if found is None:
                return everything
    return kernel_log.scan_file_lines(spark, snapshot, found, stats=False, limit=limit)


def _predicate(jvm, conditions: list, attributes: dict):
    """The Kernel conjunction of what translates of ``conditions`` on ``attributes``; ``None`` when nothing does."""
    return conjunction(jvm, [p for c in conditions if (p := predicate(jvm, c, attributes)) is not None])


def _timestamp_partition_keys(snapshot) -> dict[str, str]:
    """``{column name: its key in partitionValues}`` for ``snapshot``'s partition columns of type TIMESTAMP
    (with a time zone; TIMESTAMP_NTZ values name none and are read so by both)."""
    metadata = snapshot.metadata()
    partitioned = set(scala_list(metadata.partitionColumns()))
    return {f.name(): partition_value_key(snapshot, f.name()) for f in metadata.schema().fields()
            if f.name() in partitioned and f.dataType().typeName() == "timestamp"}


def _delta_scans(spark: SparkSession, df: DataFrame) -> tuple[list[tuple], list] | None:
    """``(snapshot, filter conditions, {exprId: column name})`` for each Delta relation of ``df``'s plan optimised
    without :data:`PREPARE_DELTA_SCAN`, and the change feed relations (JVM ``DeltaCDFRelation``) of that plan;
    ``None`` when a leaf is neither a Delta relation, a change feed nor file-less."""
    jvm = spark.sparkContext._jvm
    clone = spark._jsparkSession.cloneSession()  # its own conf: the exclusion touches no other thread's query
    excluded = clone.conf().get("spark.sql.optimizer.excludedRules", "")
    clone.conf().set("spark.sql.optimizer.excludedRules", ",".join(r for r in (excluded, PREPARE_DELTA_SCAN) if r))
    # the plan as analysed (in the request's time zone, with its parameters bound), optimised again in the clone
    plan = jvm.org.apache.spark.sql.classic.Dataset.ofRows(clone, df._jdf.queryExecution().analyzed()) \
        .queryExecution().optimizedPlan()
    scans: list[tuple] = []
    feeds: list = []
    stack = [(plan, [])]
    while stack:
        node, conditions = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "LogicalRelation" and is_change_feed(node.relation()):
            feeds.append(node.relation())  # its filters apply to change rows: all of its range's files count
            continue
        if kind == "LogicalRelation":
            location = _location(node)
            if location is None or location.getClass().getSimpleName() != "TahoeLogFileIndex":
                return None
            attributes, output = {}, node.output().iterator()
            while output.hasNext():
                attribute = output.next()
                attributes[attribute.exprId().id()] = attribute.name()
            scans.append((location.snapshotAtAnalysis(), conditions, attributes))
            continue
        children = scala_list(node.children())
        if not children:
            if kind not in FILELESS_LEAVES:
                return None
            continue
        # Spark pushes no filter below a nondeterministic filter or projection (that would change the rows
        # rand(), a UDF or monotonically_increasing_id() sees), so Delta lists every file below such a node
        # for the conditions above it: they must not prune here either, nor a nondeterministic condition itself
        if kind == "Filter":
            conditions = conditions + [node.condition()] if node.condition().deterministic() else []
        elif kind != "Project" or not all(e.deterministic() for e in scala_list(node.projectList())):
            conditions = []  # a filter above a join or an aggregate says nothing of one relation's rows either
        stack.extend((child, conditions) for child in children)
    return scans, feeds


def _location(relation):
    """The file index of a ``LogicalRelation`` over files (``HadoopFsRelation``); ``None`` for another relation."""
    try:
        return relation.relation().location()
    except Exception:  # py4j: no such method on a JDBC or other source's relation
        return None
