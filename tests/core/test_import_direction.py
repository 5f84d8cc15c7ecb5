"""The import direction of ../shared/DESIGN.md, read from the source with ``ast`` (nothing is imported).

Every ``import`` and ``from ... import`` of every module under backfill_lib/ counts: at module level, inside
functions and methods, under ``if TYPE_CHECKING:`` and inside ``try``. ``from package import name`` counts as an
import of the module ``package.name`` when that module exists, else of ``package``; relative imports are resolved
against the importing module's package. A module may import its own stage, except that a pure module (of intake
or plan) may import only the pure modules of its stage.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "backfill_lib"

#: the intake modules that check the request with Spark (sources, rules, target.where); the others are pure
SPARK_INTAKE = ("backfill_lib.intake.sources", "backfill_lib.intake.rule_checks",
                "backfill_lib.intake.where_check")
#: the pure modules of plan (the other plan modules read table state through the adapters)
PURE_PLAN = ("backfill_lib.plan", "backfill_lib.plan.model", "backfill_lib.plan.builder", "backfill_lib.plan.explain",
             "backfill_lib.plan.generated", "backfill_lib.plan.kinds", "backfill_lib.plan.change_feed")


def module_files() -> dict[str, Path]:
    """Every module under backfill_lib/ by dotted name (a package by its own name, from its ``__init__.py``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = module_files()
#: request, rules, table_checks, sql_text, schema_guard (and the package, and any intake module added later)
PURE_INTAKE = tuple(m for m in MODULES if (m == "backfill_lib.intake" or m.startswith("backfill_lib.intake."))
                    and m not in SPARK_INTAKE)


def imported_modules(module: str, path: Path) -> set[str]:
    """The backfill_lib modules ``module`` (its source at ``path``) imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {name for name in found if name == "backfill_lib" or name.startswith("backfill_lib.")}


IMPORTS = {module: imported_modules(module, path) for module, path in MODULES.items()}


def stage(module: str) -> str:
    """``backfill_lib.plan.model`` -> ``plan``; the top-level modules are their own stage (``runner``, ``cli``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "backfill_lib"


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@dataclass(frozen=True)
class Rule:
    """``applies(module)``: the modules the rule is about; ``allowed(module, imported)``: whether that import is."""

    id: str
    name: str
    applies: Callable[[str], bool]
    allowed: Callable[[str, str], bool]

    def violations(self) -> list[str]:
        return [f"{module} -> {imported}" for module in sorted(IMPORTS) if self.applies(module)
                for imported in sorted(IMPORTS[module]) if not self.allowed(module, imported)]


def only(*stages: str):
    """Allowed: the module's own stage and the stages (or modules, written dotted: ``plan.kinds``) named."""
    return lambda module, imported: stage(imported) == stage(module) or any(
        within(imported, f"backfill_lib.{s}") for s in stages)


def but_not(*stages: str):
    """Allowed: anything but the stages named."""
    return lambda module, imported: not any(within(imported, f"backfill_lib.{s}") for s in stages)


def pure_of(pure: tuple[str, ...]):
    """Allowed: core and the pure modules ``pure`` (not the other modules of the module's own stage)."""
    return lambda module, imported: within(imported, "backfill_lib.core") or imported in pure


RULES = [
    Rule("core", "core imports nothing else of backfill_lib",
         lambda m: stage(m) == "core", only("core")),
    Rule("adapters", "adapters import only core",
         lambda m: stage(m) == "adapters", only("core")),
    Rule("ledger", "the ledger (read by every stage) imports only core and adapters",
         lambda m: stage(m) == "ledger", only("core", "adapters")),
    Rule("intake-pure", "the pure intake modules (request, rules, table_checks, sql_text, schema_guard) import only "
                        "core and pure intake (not sources or rule_checks)",
         lambda m: m in PURE_INTAKE, pure_of(PURE_INTAKE)),
    Rule("intake-spark-side", "the Spark-side intake modules (sources, rule_checks) import only core, intake and "
                              "adapters",
         lambda m: m in SPARK_INTAKE, only("core", "intake", "adapters")),
    Rule("plan-pure", "plan.model, plan.builder, plan.explain and the strategy kinds (plan.kinds, plan.change_feed) "
                      "import only core and pure intake (not plan's other modules)",
         lambda m: m in PURE_PLAN, lambda m, i: pure_of(PURE_PLAN)(m, i) or i in PURE_INTAKE),
    Rule("plan", "the other plan modules import only core, intake, adapters and the ledger (``--only`` reads the "
                 "runs of the same request)",
         lambda m: stage(m) == "plan" and m not in PURE_PLAN, only("core", "intake", "adapters", "ledger")),
    Rule("run", "run imports neither validate nor publish",
         lambda m: stage(m) == "run", but_not("validate", "publish")),
    Rule("validate", "validate does not import publish",
         lambda m: stage(m) == "validate", but_not("publish")),
    Rule("report", "report reads what the stages recorded: it imports core, adapters, intake, the ledger, plan, run, "
                   "validate (the strategy kinds are plan's), never publish or the strategies",
         lambda m: stage(m) == "report",
         only("core", "adapters", "intake", "ledger", "plan", "run", "validate")),
    Rule("strategies", "strategies (how each stages, publishes and verifies) import core, adapters, intake, the "
                       "ledger, plan, run, validate and publish, never report or the runner",
         lambda m: stage(m) == "strategies",
         only("core", "adapters", "intake", "ledger", "plan", "run", "validate", "publish")),
    Rule("runner-and-cli", "only the API (api.py), the one code path of the CLI and of Python callers, imports "
                           "backfill_lib.runner; nothing imports backfill_lib.cli",
         lambda m: m != "backfill_lib.api",
         lambda m, i: not within(i, "backfill_lib.runner", "backfill_lib.cli")),
]

#: rules the tree breaks, as strict xfails (none today)
BROKEN: dict[str, str] = {}


@pytest.mark.parametrize("rule", [
    pytest.param(rule, id=rule.id, marks=[pytest.mark.xfail(strict=True, reason=BROKEN[rule.id])]
                 if rule.id in BROKEN else [])
    for rule in RULES
])
def test_import_direction(rule):
    violations = rule.violations()
    assert not violations, f"{rule.name}; {len(violations)} imports break it:\n" + "\n".join(violations)


def test_every_kind_of_import_is_counted(tmp_path):
    source = tmp_path / "fake.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "from .. import core\n"  # the package backfill_lib.core (no module backfill_lib.core.core)
        "from ..core import errors\n"
        "from . import model\n"
        "if TYPE_CHECKING:\n"
        "    from backfill_lib.strategies import strategy_for\n"
        "def later():\n"
        "    try:\n"
        "        import backfill_lib.ledger as ledger\n"
        "    except ImportError:\n"
        "        from backfill_lib import cli\n"
    )
    assert imported_modules("backfill_lib.plan.fake", source) == {
        "backfill_lib.core", "backfill_lib.core.errors", "backfill_lib.plan.model", "backfill_lib.strategies",
        "backfill_lib.ledger", "backfill_lib.cli"}


def test_the_import_graph_is_read_from_every_module():
    assert len(MODULES) > 40 and {"backfill_lib.core.partitions", "backfill_lib.runner", "backfill_lib.cli",
                                  "backfill_lib.strategies", "backfill_lib.strategies.base"} <= set(MODULES)
    assert "backfill_lib.core.errors" in IMPORTS["backfill_lib.core.partitions"]
    assert "backfill_lib.runner" in IMPORTS["backfill_lib.api"] and "backfill_lib.api" in IMPORTS["backfill_lib.cli"]
    assert {"backfill_lib.intake.request", "backfill_lib.intake.schema_guard"} <= set(PURE_INTAKE)
    assert set(SPARK_INTAKE) <= set(MODULES) and not set(SPARK_INTAKE) & set(PURE_INTAKE)
    # each rule is about some module: a renamed stage cannot make its rule pass by matching nothing
    for rule in RULES:
        assert any(rule.applies(m) for m in MODULES), rule.name


def pyspark_imports(path: Path) -> list[str]:
    """The ``pyspark`` imports anywhere in the source at ``path`` (module level, functions, ``try``, ...)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"line {node.lineno}: {n}" for n in names if n == "pyspark" or n.startswith("pyspark.")]
    return found


def test_the_cli_imports_no_pyspark_it_calls_the_api():
    # the CLI parses, calls backfill_lib.api and renders its documents; Spark is the API's and the stages' business
    assert pyspark_imports(MODULES["backfill_lib.cli"]) == []


def test_a_pyspark_import_anywhere_is_found(tmp_path):
    source = tmp_path / "fake.py"
    source.write_text("import json\nimport pyspark.sql as ps\ndef f():\n    from pyspark.sql import functions as F\n"
                      "    from . import pyspark_like\n")
    assert pyspark_imports(source) == ["line 2: pyspark.sql", "line 4: pyspark.sql"]
