"""Whether ``DataFrame.inputFiles()`` sees everything a query reads.

``inputFiles()`` lists the files of file scans only (a ``HadoopFsRelation``, a Hive table's location, a file
source of Data Source V2); a leaf of another kind (Delta's change feed relation, an RDD, a cached relation, a
JDBC table) reads data that it leaves out without a word, so its count would be too low, 0 for such a leaf
alone. The caller then says the size is unknown instead.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from backfill_lib.adapters.jvm_plan import is_a, scala_list
from backfill_lib.adapters.kernel_scan import FILELESS_LEAVES

#: Data Source V2 tables whose files ``inputFiles()`` lists.
FILE_TABLE = "org.apache.spark.sql.execution.datasources.v2.FileTable"


def unlisted_leaf(df: DataFrame) -> str | None:
    """The name of the first leaf of ``df``'s optimised plan (the one ``inputFiles()`` reads) whose files
    ``inputFiles()`` does not list (``DeltaCDFRelation``, ``LogicalRDD``, ``InMemoryRelation``), a relation's
    class for a ``LogicalRelation``; ``None`` when it lists them all, or under Spark Connect (no plan to walk
    in the driver: ``inputFiles()`` answers as before)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    stack = [jdf.queryExecution().optimizedPlan()]
    while stack:
        node = stack.pop()
        children = scala_list(node.children())
        if children:
            stack.extend(children)
            continue
        kind = node.getClass().getSimpleName()
        if kind in FILELESS_LEAVES or kind == "HiveTableRelation":
            continue
        if kind == "LogicalRelation":
            relation = node.relation().getClass()
            if relation.getSimpleName() != "HadoopFsRelation":
                return relation.getSimpleName() or relation.getName().rsplit(".", 1)[-1]  # anonymous: Outer$$anon$1
            continue
        if kind == "DataSourceV2ScanRelation" and is_a(node.relation().table().getClass(), FILE_TABLE):
            continue
        return kind
    return None

