"""The wheel: ``python -m build`` makes it, it installs into a fresh virtual environment that holds another
PySpark patch release without replacing it, and ``backfill`` runs.

The wheel is what clusters install (conf/cluster/: the EMR bootstrap action, the Databricks wheel task), so it
must hold every file of the package, declare the ``backfill`` console script and its dependencies, and work
without this checkout on the path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile

from tests.conftest import ROOT

#: the PySpark patch release the test's "platform" environment holds before the wheel is installed
PLATFORM_PYSPARK = "4.1.3"
#: every command of ``backfill --help``, in its order
COMMANDS = ("plan", "run", "resume", "abandon", "publish", "rollback", "cleanup", "history", "status", "report", "demo")


def _run(*args, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_wheel_installs_in_a_fresh_venv_and_backfill_help_runs(tmp_path):
    # the sdist, then the wheel from the unpacked sdist (build's default): no stale build/ of this checkout can
    # leak into the wheel, and the sdist is proven complete
    _run(sys.executable, "-m", "build", "--outdir", str(tmp_path / "dist"), str(ROOT))
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == [
        "delta_backfill-0.1.0-py3-none-any.whl", "delta_backfill-0.1.0.tar.gz"]
    wheel = tmp_path / "dist" / "delta_backfill-0.1.0-py3-none-any.whl"

    # every file of the package is in the wheel (a non-Python file added under backfill_lib/ must be shipped too)
    names = set(zipfile.ZipFile(wheel).namelist())
    package_files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "backfill_lib").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts}
    assert "backfill_lib/strategies/recompute.py" in package_files
    assert package_files <= names, f"missing from the wheel: {sorted(package_files - names)}"
    assert not any(n.startswith(("tests/", "jobs/", "conf/")) for n in names)
    entry_points = zipfile.ZipFile(wheel).read("delta_backfill-0.1.0.dist-info/entry_points.txt").decode()
    assert "backfill = backfill_lib.cli:console_main" in entry_points

    # PySpark and delta-spark are only the `local` extra: a cluster's own must survive the install
    requires = [line.split(":", 1)[1].strip() for line in zipfile.ZipFile(wheel).read(
        "delta_backfill-0.1.0.dist-info/METADATA").decode().splitlines() if line.startswith("Requires-Dist:")]
    spark_requires = sorted(r for r in requires if r.startswith(("pyspark", "delta-spark")))
    assert spark_requires == ['delta-spark==4.4.0; extra == "local"', 'pyspark==4.1.4; extra == "local"']

    # a fresh virtual environment (no system site-packages) that holds another PySpark patch release, as a
    # platform would; then the wheel with its dependencies
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run(str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-compile", f"pyspark=={PLATFORM_PYSPARK}",
         env=env, cwd=tmp_path)
    # --no-compile: the test imports a handful of modules; byte-compiling all ~10,000 installed ones is not checked
    _run(str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-compile", str(wheel), env=env, cwd=tmp_path)
    versions = _run(str(bin_dir / "python"), "-c", "import pyspark, importlib.util; "
                    "print(pyspark.__version__, importlib.util.find_spec('delta') is not None)",
                    env=env, cwd=tmp_path).stdout.split()
    assert versions == [PLATFORM_PYSPARK, "False"]  # the platform's PySpark untouched, no delta-spark pulled in

    where = _run(str(bin_dir / "python"), "-c", "import backfill_lib; print(backfill_lib.__file__)", env=env,
                 cwd=tmp_path).stdout.strip()
    assert where.startswith(str(env_dir)), where  # the installed package, not this checkout

    out = _run(str(bin_dir / "backfill"), "--help", env={**env, "COLUMNS": "100"}, cwd=tmp_path).stdout
    assert "Safe backfills of Delta Lake tables: intake, plan, run, validate, publish." in out
    commands = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and len(line.split()) > 2
                and line.split()[1] in COMMANDS]
    assert set(commands) == set(COMMANDS)  # wrapped descriptions may repeat a word

    # the console script reports a bad request with the documented exit code, without starting Spark
    bad = subprocess.run([str(bin_dir / "backfill"), "run", "missing.yml"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2
    assert "error: missing.yml: request file not found" in bad.stderr

    # a command that needs Spark names what is missing at start, before any JVM: here Delta's Python module
    no_delta = subprocess.run([str(bin_dir / "backfill"), "status"], capture_output=True, text=True,
                              env={**env, "BACKFILL_HOME": str(tmp_path / "home")}, cwd=tmp_path, timeout=120)
    assert no_delta.returncode == 2, no_delta.stderr
    assert no_delta.stderr.startswith(
        f"error: Delta Lake's Python module `delta` is not installed for {bin_dir / 'python'}: "), no_delta.stderr
