#!/usr/bin/env bash
# Run any `backfill` command with spark-submit on YARN, for example:
#
#   conf/cluster/spark-submit-yarn.sh run conf/backfills/NAME.yml
#   conf/cluster/spark-submit-yarn.sh plan conf/backfills/NAME.yml
#   conf/cluster/spark-submit-yarn.sh publish RUN_ID
#
# Run it from the project root of a checkout on a YARN gateway (HADOOP_CONF_DIR or YARN_CONF_DIR set, Spark 4.1
# with Scala 2.13 on PATH). Client deploy mode: the driver runs here, reads the request, its SQL and its
# expectation suite from this checkout (relative paths resolve against the working directory) and writes the
# run report under `home` of the settings. The job's exit code is spark-submit's (0 published, 2 bad request,
# 3 gate failed, 4 publish refused; see docs/reference/cli.md).
#
# Every node needs a Python 3.11 with the wheel installed (`pip install delta_backfill-0.1.0-py3-none-any.whl`,
# built by `python -m build`); PYSPARK_PYTHON names it and becomes spark.pyspark.python (driver and executors).
# The tables live in the cluster's Hive metastore (hive-site.xml in the Spark conf dir); the catalog must be
# Hive, which a spark-submit of a Python file does not pick by itself, hence spark.sql.catalogImplementation.
# Delta comes from Maven Central (--packages); a cluster without access to it can use --jars with the same
# artifacts. Options: https://spark.apache.org/docs/latest/submitting-applications.html and
# https://spark.apache.org/docs/latest/running-on-yarn.html
set -euo pipefail

exec spark-submit \
  --master yarn \
  --deploy-mode client \
  --name delta-backfill \
  --packages io.delta:delta-spark_4.1_2.13:4.4.0 \
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
  --conf spark.sql.catalogImplementation=hive \
  --conf spark.pyspark.python="${PYSPARK_PYTHON:-python3.11}" \
  jobs/backfill_job.py --settings "${BACKFILL_SETTINGS:-conf/cluster/settings.yml}" "$@"
