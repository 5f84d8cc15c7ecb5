"""A run's first minute shows what it is doing on a terminal, and nothing anywhere else."""

from __future__ import annotations

import io

from rich.console import Console

from backfill_lib import cli


def test_a_terminal_sees_a_spinner_that_says_what_the_run_waits_for_and_a_log_sees_nothing(monkeypatch):
    terminal = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=terminal, force_terminal=True, width=120))
    with cli._starting("starting Spark (local[2]) for r.yml") as starting:
        starting.update("planning r.yml: source, target's Delta log, leases")
    assert "planning r.yml: source, target's Delta log, leases" in terminal.getvalue()

    log = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=log, force_terminal=False))
    with cli._starting("starting Spark (local[2]) for r.yml") as starting:
        starting.update("planning r.yml")
    assert log.getvalue() == ""
