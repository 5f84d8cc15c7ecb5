"""The documentation site builds cleanly, its generated reference pages come from the code, and the README stays a
five-minute read. No Spark: the build's hook (docs/hooks.py) imports the request model and the typer app only."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

#: the README is the five-minute read; the rest belongs in docs/
README_MAX_LINES = 260


def _missing_docs_tools() -> list[str]:
    return [name for name in ("mkdocs", "material") if importlib.util.find_spec(name) is None]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built by `python -m mkdocs build --strict` from the repository root into a temporary folder."""
    missing = _missing_docs_tools()
    if missing:
        pytest.skip(f"the docs extra is not installed (no {', '.join(missing)}): pip install -e '.[docs]'")
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return site_dir


def test_docs_build_strict(site):
    assert (site / "index.html").is_file()


def test_generated_references_name_the_code(site):
    request_page = (site / "reference" / "request" / "index.html").read_text()
    # fields of BackfillRequest, rendered from model_json_schema() by the hook
    for field in ("strategy", "publish_mode", "staging", "on_source_change"):
        assert f"<code>{field}</code>" in request_page, field
    assert "<!-- generated:" not in request_page
    # the note for readers of the Markdown source is the hook's to remove
    assert "Reading the Markdown source" not in request_page
    assert "Reading the Markdown source" in (ROOT / "docs" / "reference" / "request.md").read_text()
    cli_page = (site / "reference" / "cli" / "index.html").read_text()
    # every command of the typer app, rendered from typer.main.get_command(app)
    for command in ("plan", "run", "status", "rollback", "cleanup"):
        assert f"backfill {command}" in cli_page, command
    assert "--older-than" in cli_page
    errors_page = (site / "troubleshooting" / "index.html").read_text()
    assert "<code>GateFailedError</code>" in errors_page


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move the details into docs/"
    )
    demo_lines = [line for line in lines if line.startswith("backfill demo && ")]
    assert len(demo_lines) == 1, "tests/e2e/test_demo.py runs the README's one line starting 'backfill demo && '"
