"""GX imported ahead of need (backfill_lib/adapters/gx_import.py), each case in a fresh interpreter: this test
session has GX imported already."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_import_runs_in_a_thread_once_and_the_caller_gets_the_module():
    out = _python("""
        import sys, threading
        from backfill_lib.adapters import gx_import
        assert "great_expectations" not in sys.modules
        gx_import.import_early()
        gx_import.import_early()  # a second call starts nothing
        threads = [t.name for t in threading.enumerate() if t.name == "gx-import"]
        gx = gx_import.great_expectations()
        print(len(threads), gx.__name__, hasattr(gx, "ExpectationSuite"), gx_import._thread.is_alive())
    """)
    assert out == "1 great_expectations True False"


def test_an_import_that_fails_in_the_thread_raises_in_the_caller():
    out = _python("""
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "great_expectations":
                    raise ImportError("no GX here")

        sys.meta_path.insert(0, Refuse())
        from backfill_lib.adapters import gx_import
        gx_import.import_early()
        try:
            gx_import.great_expectations()
        except ImportError as exc:
            print("raised:", exc, gx_import._thread.is_alive())
    """)
    assert out == "raised: no GX here False"
