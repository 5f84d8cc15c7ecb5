"""Progress of a run: a rich progress bar in a terminal, plain log lines elsewhere; every line has the run ID."""

from __future__ import annotations

import logging
import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = logging.getLogger("backfill.run")


class Reporter:
    """Reports a run's stages and partition progress to the console (bar) or to logging (lines)."""

    def __init__(self, console: Console, run_id: str = ""):
        self.console = console
        self.run_id = run_id
        self._progress: Progress | None = None
        self._task = None
        self._lock = threading.Lock()
        self.rows = 0

    def stage(self, message: str) -> None:
        """One line about the run, prefixed with its run ID."""
        line = f"[{self.run_id}] {message}"
        if self.console.is_terminal:
            self.console.print(line, highlight=False, markup=False)  # a run ID in brackets is no markup tag
        else:
            log.info(line)

    def start_partitions(self, total: int, what: str, done: int = 0, rows: int = 0) -> None:
        """Start counting ``total`` partitions, ``done`` of them (holding ``rows`` rows) already finished."""
        self.rows = rows
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn(f"[{self.run_id}] {what}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("partitions  {task.fields[rows]:,} rows"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(what, total=total, completed=done, rows=rows)
        elif done:
            log.info("[%s] %s: %d of %d partitions already done (%d rows)", self.run_id, what, done, total, rows)

    def advance(self, partitions: int, rows: int, detail: str) -> None:
        """Count ``partitions`` more done with ``rows`` rows; safe to call from several threads."""
        with self._lock:
            self.rows += rows
        if self._progress is not None:
            self._progress.update(self._task, advance=partitions, rows=self.rows)
        else:
            log.info("[%s] %s: %d partitions, %d rows", self.run_id, detail, partitions, rows)

    def stop_partitions(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
