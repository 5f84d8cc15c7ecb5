"""A backfill process for the crash tests: create small tables if missing, then run ``backfill`` commands.

    python tests/crash_job.py SCHEMA[,SCHEMA...] -- ARGS [-- ARGS ...]

Creates ``SCHEMA.events`` (the target) and ``SCHEMA.events_src`` (the source) for each schema when they do not
exist (only the target for a schema written ``SCHEMA+target``, only the source for ``SCHEMA+source``, so that
requests may share a source; and the mart ``SCHEMA.events_monthly`` of :func:`tests.fixtures.make_monthly` for a
schema written ``SCHEMA+monthly``), then runs each ``ARGS`` through :func:`backfill_lib.cli.main` in this one process
(one Spark start, with the test session's :data:`tests.conftest.INTERPRETED` confs), printing
``crash_job: exit CODE: ARGS`` on stderr after each, and exits with the first non-zero exit code. A command that
fails does not stop the next: a run cancelled by SIGTERM and its resume share one process (the JVM ignores
SIGTERM). The JVM compiles with C1 only (:data:`JIT_OPTIONS`). ``BACKFILL_HOME`` chooses the folder (warehouse,
Derby metastore); ``BACKFILL_CRASH_AT`` kills the process at a named point (see :mod:`backfill_lib.core.faults`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backfill_lib.adapters.session import SHORT_LIVED_JVM_OPTIONS, get_spark  # noqa: E402
from backfill_lib.cli import main  # noqa: E402
from backfill_lib.core.settings import load_settings  # noqa: E402
from tests.conftest import INTERPRETED  # noqa: E402
from tests.fixtures import EVENTS_SCHEMA, FULL_SOURCE, TARGET_ROWS, make_monthly  # noqa: E402


#: Java options of these JVMs, before the driver's own (``spark.driver.defaultJavaOptions``): C1 only, with the
#: tiered code cache. Each process lives for a minute or two of tiny jobs on a cold JVM, where C2's compiler threads
#: took CPU from the 2 cores the test workers share (see the commit). C1 alone would reserve 48 MB of code cache, which a run fills
#: within a minute; 240 MB does not fill.
JIT_OPTIONS = SHORT_LIVED_JVM_OPTIONS


def setup(spark, schema: str) -> None:
    schema, *kinds = schema.split("+")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    if "monthly" in kinds and not spark.catalog.tableExists(f"{schema}.events_monthly"):
        setup(spark, schema)  # the mart is built from the target
        make_monthly(spark, schema)
    both = not {"target", "source"} & set(kinds)
    tables = [(name, rows) for name, rows, kind in (("events", TARGET_ROWS, "target"),
                                                    ("events_src", FULL_SOURCE, "source")) if both or kind in kinds]
    for name, rows in tables:
        if not spark.catalog.tableExists(f"{schema}.{name}"):
            df = spark.createDataFrame(rows, EVENTS_SCHEMA)
            try:
                df.write.format("delta").partitionBy("dt").saveAsTable(f"{schema}.{name}")
            except Exception:
                # processes sharing a metastore create the tables at once: the loser finds the winner's, whose
                # catalog entry follows its first commit
                for _ in range(20):
                    if spark.catalog.tableExists(f"{schema}.{name}"):
                        break
                    time.sleep(0.5)
                else:
                    raise


def run(argv: list[str]) -> int:
    schemas, *commands = " ".join(argv).split(" -- ")
    settings = load_settings()
    options = {**settings.spark.options, "spark.driver.defaultJavaOptions": JIT_OPTIONS, **INTERPRETED}
    spark = get_spark(settings.model_copy(update={"spark": settings.spark.model_copy(update={"options": options})}))
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    for schema in schemas.split(","):
        setup(spark, schema)
    first = 0
    for command in commands:
        code = main(command.split())
        print(f"crash_job: exit {code}: {command}", file=sys.stderr, flush=True)
        first = first or code
    return first


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
