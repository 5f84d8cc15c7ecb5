"""The layers contract of ``[tool.importlinter]`` in pyproject.toml, checked by import-linter (indirect imports
too), and the debt it lists: each ignored import must still exist, so a fixed one leaves the list."""

from __future__ import annotations

import tomllib

import grimp
from importlinter.cli import lint_imports

from tests.conftest import ROOT


def test_the_stages_import_downwards(capsys):
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out[-4000:]


def test_every_ignored_import_is_still_made():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    graph = grimp.build_graph(config["root_package"])
    ignored = [i for contract in config["contracts"] for i in contract.get("ignore_imports", [])]
    gone = [i for i in ignored if not graph.direct_import_exists(
        importer=i.split(" -> ")[0], imported=i.split(" -> ")[1])]
    assert (len(ignored), gone) == (7, [])
