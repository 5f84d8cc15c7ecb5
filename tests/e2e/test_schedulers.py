"""The scheduler examples, checked offline: the Databricks Asset Bundle (conf/schedulers/databricks/databricks.yml)
and the Airflow DAG (conf/schedulers/airflow/delta_backfill_dag.py). No Airflow or Databricks CLI is installed, so
the DAG is parsed, not imported: its exit-code mapping functions are compiled from its source and run here."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

import jinja2
import yaml

from backfill_lib.core.errors import GateFailedError, IntakeError, PublishError
from backfill_lib.plan.builder import check_run_id
from tests.conftest import ROOT

BUNDLE = ROOT / "conf" / "schedulers" / "databricks" / "databricks.yml"
DAG = ROOT / "conf" / "schedulers" / "airflow" / "delta_backfill_dag.py"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _root_options_then_command(parameters: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split ``--opt value`` pairs before the command from the command and its arguments."""
    options, i = {}, 0
    while parameters[i].startswith("--"):
        options[parameters[i]] = parameters[i + 1]
        i += 2
    return options, parameters[i:]


def _check_backfill_arguments(parameters: list[str], project: Path, run_id_template: str, **context) -> None:
    options, command = _root_options_then_command(parameters)
    assert set(options) == {"--project-dir", "--settings"}
    assert (project / options["--settings"]).is_file()
    assert command[0] == "run" and (project / command[1]).is_file()
    assert command[2] == "--run-id" and command[3] == run_id_template
    # the same run ID on every retry resumes the run; it must be a valid one once the scheduler fills it in
    assert check_run_id(jinja2.Template(run_id_template).render(**context))


def test_bundle_builds_this_wheel_and_runs_its_entry_point():
    bundle = yaml.safe_load(BUNDLE.read_text())
    here = BUNDLE.parent
    (artifact,) = bundle["artifacts"].values()
    assert artifact["type"] == "whl" and artifact["build"] == "python -m build --wheel"
    assert (here / artifact["path"]).resolve() == ROOT
    assert [(here / p).resolve() for p in bundle["sync"]["paths"]] == [ROOT / "conf", ROOT / "expectations"]

    (job,) = bundle["resources"]["jobs"].values()
    assert job["max_concurrent_runs"] == 1  # two runs of one request would only meet the lease
    (task,) = job["tasks"]
    wheel_task = task["python_wheel_task"]
    assert wheel_task["package_name"] == PROJECT["name"] == "delta-backfill"
    assert wheel_task["entry_point"] in PROJECT["scripts"]
    wheel_name = f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}-py3-none-any.whl"
    (library,) = task["libraries"]
    assert fnmatch.fnmatch(str((here / library["whl"]).resolve().parent / wheel_name),
                           str((here / library["whl"]).resolve()))
    parameters = [p.replace("${workspace.file_path}", str(ROOT)) for p in wheel_task["parameters"]]
    assert parameters[:2] == ["--project-dir", str(ROOT)]
    # Databricks fills {{job.run_id}} (not Jinja: a dotted name); render it the same way for the check
    _check_backfill_arguments(parameters, ROOT, "dbx_{{job.run_id}}", job={"run_id": 1093842761})
    assert task["max_retries"] == 2


def _dag_tree() -> ast.Module:
    return ast.parse(DAG.read_text(), filename=str(DAG))


def _constants(tree: ast.Module) -> dict[str, object]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


def _functions(tree: ast.Module, *names: str) -> dict:
    """Compile the named top-level functions of the DAG file (they use only ``re`` and FINAL_EXIT_CODES)."""
    import re

    module = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names],
                        type_ignores=[])
    scope = {"re": re, "FINAL_EXIT_CODES": _constants(tree)["FINAL_EXIT_CODES"]}
    exec(compile(module, str(DAG), "exec"), scope)
    return scope


def test_dag_uses_the_providers_operators_and_the_projects_files():
    tree = _dag_tree()
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("airflow.providers.apache.spark.operators.spark_submit", "SparkSubmitOperator") in imported
    assert ("airflow.providers.databricks.operators.databricks", "DatabricksSubmitRunOperator") in imported
    constants = _constants(tree)
    assert (ROOT / constants["REQUEST"]).is_file()
    calls = {kw.value.value: call for call in ast.walk(tree) if isinstance(call, ast.Call)
             for kw in call.keywords if kw.arg == "task_id" and isinstance(kw.value, ast.Constant)}
    assert set(calls) == {"plan", "run", "databricks_run"}
    assert calls["run"].func.id == "BackfillSparkSubmitOperator"
    run_args = next(kw.value for kw in calls["run"].keywords if kw.arg == "application_args")
    parameters = [ROOT.as_posix() if isinstance(e, ast.Name) and e.id == "PROJECT" else
                  constants[e.id] if isinstance(e, ast.Name) else e.value for e in run_args.elts]
    _check_backfill_arguments(parameters, ROOT, constants["RUN_ID"], ts_nodash="20261201T000000")
    # the task after a refusal must not retry: plan has retries=0, run maps exit codes
    assert any(kw.arg == "retries" and kw.value.value == 0 for kw in calls["plan"].keywords)


def test_dag_retries_only_exit_codes_a_retry_can_help():
    tree = _dag_tree()
    assert _constants(tree)["FINAL_EXIT_CODES"] == {IntakeError.exit_code, GateFailedError.exit_code,
                                                    PublishError.exit_code} == {2, 3, 4}
    scope = _functions(tree, "exit_code_of", "retry_may_help")
    message = ("Cannot execute: spark-submit --master yarn --name delta-backfill-run "
               "/opt/delta-backfill/project/jobs/backfill_job.py. Error code is: 3.")
    assert scope["exit_code_of"](message) == 3
    assert scope["exit_code_of"]("Task received SIGTERM") is None
    assert [scope["retry_may_help"](c) for c in (1, 2, 3, 4, 130, None)] == [True, False, False, False, True, True]
