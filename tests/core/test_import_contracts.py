"""The layers contract of ``[tool.importlinter]`` in pyproject.toml, checked by import-linter (indirect imports
too), and the debt it lists: each ignored import must still exist, so a fixed one leaves the list."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import grimp

from tests.conftest import ROOT


def test_the_stages_import_downwards():
    # In its own process: import-linter configures logging with dictConfig, which disables every logger already made
    # in this worker (the run's progress lines among them) for the tests that follow.
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, "
                           "no_logo=True))"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_no_import_is_ignored_and_no_module_imports_itself_back():
    """The contract ignores no import, and no chain of imports (lazy ones in functions too) leads from a module
    back to itself."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert [i for contract in config["contracts"] for i in contract.get("ignore_imports", [])] == []
    graph = grimp.build_graph(config["root_package"])
    circles = sorted({tuple(sorted(chain)) for module in graph.modules
                      for imported in graph.find_modules_directly_imported_by(module)
                      if (chain := graph.find_shortest_chain(importer=imported, imported=module))})
    assert circles == []
