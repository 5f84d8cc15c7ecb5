"""The wheel: ``python -m build`` makes it, it installs into a fresh virtual environment, and ``backfill`` runs.

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

    # a fresh virtual environment (no system site-packages), the wheel with its dependencies
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # --no-compile: the test imports a handful of modules; byte-compiling all ~10,000 installed ones is not checked
    _run(str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-compile", str(wheel), env=env, cwd=tmp_path)

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
