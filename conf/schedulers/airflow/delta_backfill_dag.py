"""Airflow DAG example: run one delta-backfill request with spark-submit, or as a Databricks one-time run.

Copy this file into the DAGs folder and replace the constants below. It needs Airflow 2.7+ with
``apache-airflow-providers-apache-spark`` (``SparkSubmitOperator``) and, for the Databricks task,
``apache-airflow-providers-databricks`` (``DatabricksSubmitRunOperator``). It was checked offline only (parsed,
structure and exit-code mapping tested in ``tests/e2e/test_schedulers.py``), not run on an Airflow.

Failure semantics follow the product's exit codes (docs/reference/cli.md, "Exit codes"):

* 0: published, or nothing to change: the task succeeds.
* 1 (a Spark or source failure, a commit conflict that did not clear) and 130 (cancelled): worth a retry. Every
  attempt passes the same ``--run-id`` (from the DAG run's logical date), so a retry *resumes* the run from the
  ledger: staged partitions are skipped, nothing is written twice.
* 2 (bad request, settings, another run holds the range), 3 (a validation gate failed, duplicate keys) and 4
  (publish refused or rolled back): a retry would meet the same refusal, so the task fails without retrying and
  someone reads the run report.

``SparkSubmitOperator`` fails every non-zero exit alike; :class:`BackfillSparkSubmitOperator` reads the exit code
from its error and turns 2, 3 and 4 into ``AirflowFailException`` (fail, no retry). A Databricks run reports only
"failed", so the Databricks task retries every failure: a refusal then repeats harmlessly (it writes nothing).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from airflow import DAG
from airflow.exceptions import AirflowException, AirflowFailException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator

#: the project files (jobs/, conf/, expectations/) on the Airflow worker that runs spark-submit (client mode)
PROJECT = "/opt/delta-backfill/project"
#: the request, relative to PROJECT
REQUEST = "conf/backfills/fix_daily_route_delays.yml"
#: one backfill run ID per DAG run, the same for every retry of it: letters, digits and underscores
RUN_ID = "airflow_{{ ts_nodash }}"
#: exit codes after which a retry cannot help (see the module docstring)
FINAL_EXIT_CODES = {2, 3, 4}
#: the Databricks job cluster, as in conf/cluster/databricks_job.json
DATABRICKS_CLUSTER = {
    "spark_version": "REPLACE: a Databricks Runtime version key with Apache Spark 4.1",
    "node_type_id": "REPLACE: a node type of your cloud",
    "num_workers": 2,
    "data_security_mode": "SINGLE_USER",
}
DATABRICKS_PROJECT = "/Workspace/Shared/delta-backfill"
DATABRICKS_WHEEL = "/Volumes/main/ops/artifacts/delta_backfill-0.1.0-py3-none-any.whl"


def exit_code_of(message: str) -> int | None:
    """The exit code in ``SparkSubmitHook``'s error (``Cannot execute: ... Error code is: 3.``), or None."""
    found = re.search(r"Error code is: (-?\d+)", message)
    return int(found.group(1)) if found else None


def retry_may_help(code: int | None) -> bool:
    """Whether a task that ended with exit ``code`` (None: unknown, e.g. the worker died) is worth retrying."""
    return code not in FINAL_EXIT_CODES


class BackfillSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` that fails without retrying on exit codes 2, 3 and 4."""

    def execute(self, context):
        try:
            return super().execute(context)
        except AirflowException as exc:
            code = exit_code_of(str(exc))
            if not retry_may_help(code):
                raise AirflowFailException(f"delta-backfill exited {code}: not retried, see the run report") from exc
            raise


with DAG(
    dag_id="delta_backfill_fix_daily_route_delays",
    schedule=None,  # a backfill is started by hand (or by another DAG), not on a calendar
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    tags=["delta-backfill"],
) as dag:
    # The dry run first: a bad request fails here, before any cluster work; its output is the plan reviewers read.
    plan = BackfillSparkSubmitOperator(
        task_id="plan",
        application=f"{PROJECT}/jobs/backfill_job.py",
        application_args=["--project-dir", PROJECT, "--settings", "conf/cluster/settings.yml", "plan", REQUEST],
        packages="io.delta:delta-spark_4.1_2.13:4.4.0",
        conf={
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.catalogImplementation": "hive",
        },
        name="delta-backfill-plan",
        retries=0,
    )
    run = BackfillSparkSubmitOperator(
        task_id="run",
        application=f"{PROJECT}/jobs/backfill_job.py",
        application_args=["--project-dir", PROJECT, "--settings", "conf/cluster/settings.yml", "run", REQUEST,
                          "--run-id", RUN_ID],
        packages="io.delta:delta-spark_4.1_2.13:4.4.0",
        conf={
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.catalogImplementation": "hive",
        },
        name="delta-backfill-run",
    )
    # The same request as a Databricks one-time run (Jobs API runs/submit) with the wheel task; the run ID is the
    # same template, so a retry resumes. Pick this task or the spark-submit pair for a deployment.
    databricks_run = DatabricksSubmitRunOperator(
        task_id="databricks_run",
        json={
            "run_name": "delta-backfill {{ ts_nodash }}",
            "tasks": [{
                "task_key": "backfill",
                "python_wheel_task": {
                    "package_name": "delta-backfill",
                    "entry_point": "backfill",
                    "parameters": ["--project-dir", DATABRICKS_PROJECT, "--settings", "conf/cluster/settings.yml",
                                   "run", REQUEST, "--run-id", RUN_ID],
                },
                "libraries": [{"whl": DATABRICKS_WHEEL}],
                "new_cluster": DATABRICKS_CLUSTER,
            }],
        },
    )
    plan >> run
