#!/usr/bin/env bash
# Run any `backfill` command with spark-submit on Kubernetes, for example:
#
#   K8S_API_SERVER=https://k8s.example.com:443 IMAGE=registry.example.com/delta-backfill:0.1.0 \
#   HIVE_METASTORE_URI=thrift://metastore.example.com:9083 \
#     conf/cluster/spark-submit-k8s.sh run conf/backfills/NAME.yml
#
# Cluster deploy mode: the driver runs in a pod of IMAGE, so everything it reads must be in the image:
# - Spark 4.1 with Scala 2.13 and Python 3.11 (an apache/spark 4.1 Python image, or one built with Spark's
#   docker-image-tool.sh), with the wheel installed (`pip install delta_backfill-0.1.0-py3-none-any.whl`);
# - this project's jobs/, conf/ and expectations/ under the image's working directory (/opt/spark/work-dir in the
#   apache/spark images), because requests name their SQL and suites relative to the working directory;
# - Delta's jars, either baked into /opt/spark/jars or fetched at start with --packages (below; the pods then
#   need Maven Central).
# The run report is written under `home` of the settings inside the driver pod: mount a volume there to keep it.
# The tables live in the Hive metastore at HIVE_METASTORE_URI. Options:
# https://spark.apache.org/docs/latest/running-on-kubernetes.html
set -euo pipefail

exec spark-submit \
  --master "k8s://${K8S_API_SERVER:?set K8S_API_SERVER, the Kubernetes API server URL}" \
  --deploy-mode cluster \
  --name delta-backfill \
  --conf spark.kubernetes.namespace="${K8S_NAMESPACE:-default}" \
  --conf spark.kubernetes.container.image="${IMAGE:?set IMAGE, the Spark image with the wheel and the project files}" \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName="${K8S_SERVICE_ACCOUNT:-spark}" \
  --conf spark.executor.instances="${EXECUTORS:-2}" \
  --packages io.delta:delta-spark_4.1_2.13:4.4.0 \
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
  --conf spark.sql.catalogImplementation=hive \
  --conf spark.hadoop.hive.metastore.uris="${HIVE_METASTORE_URI:?set HIVE_METASTORE_URI, thrift://host:9083}" \
  local:///opt/spark/work-dir/jobs/backfill_job.py --settings conf/cluster/settings.yml "$@"
