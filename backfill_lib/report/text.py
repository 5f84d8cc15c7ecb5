"""The ``backfill`` command's text output of what :mod:`backfill_lib.api` returns: a run's result, its failed
checks, ``status``, ``history``, ``cleanup`` and ``demo``, printed with ``rich`` on the console given (``--json`` prints
the documents of :mod:`backfill_lib.report.documents` instead)."""

from __future__ import annotations

import json
from datetime import timezone

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from backfill_lib.core.settings import Settings
from backfill_lib.report.documents import planned_partitions_of

#: A run's statuses while its process works (or after it stopped without recording an end).
UNDER_WAY = ("planned", "staging", "validating", "publishing")


def print_report_path(console: Console, settings: Settings, run_id: str) -> None:
    """``report: PATH`` of run ``run_id``'s HTML report, when it was written."""
    report_html = settings.runs_dir / run_id / "report.html"
    if report_html.exists():
        console.print(f"report: {report_html}", highlight=False)


def print_result(console: Console, settings: Settings, result) -> None:
    """The lines ``run``, ``resume`` and ``publish`` end with: what the run did, and its marts."""
    the_plan = result.plan
    print_report_path(console, settings, the_plan.run_id)
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
        f"{passed} of {len(result.checks)} checks passed in all (validation, sources, post-publish, monitor)",
        highlight=False,
    )
    for mart in result.marts:
        if mart.status == "published":
            console.print(f"  mart {mart.plan.target_table}: {len(mart.plan.partitions)} partitions published as "
                          f"version {mart.published_version} (was {mart.pre_publish_version})", highlight=False)
        else:
            console.print(f"  mart {mart.plan.target_table}: {mart.status}", highlight=False)


def print_failures(console: Console, failures) -> None:
    """The table of a gate's failed checks (the first 50)."""
    table = Table(title="Failed checks", title_justify="left")
    for col in ("kind", "check", "partition", "observed", "expected"):
        table.add_column(col)
    for c in failures[:50]:
        where = c.partition or ("the range" if c.batch is None else f"batch {c.batch}")
        table.add_row(c.kind, c.name, where, c.observed or "", c.expected or "")
    if len(failures) > 50:
        table.add_row("...", f"{len(failures) - 50} more", "", "", "")
    console.print(table)


def print_status(console: Console, run_id: str | None, shown) -> None:
    """``status``: the latest runs (:class:`~backfill_lib.report.status.RunList`), or one run and its partitions
    (:class:`~backfill_lib.report.status.RunStatus`)."""
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
        f"target version seen {_n(run_['target_version_seen'])}, pre-publish {_n(run_['pre_publish_version'])}, "
        f"published {_n(run_['published_version'])}; "
        + ("staging pinned in the run's Spark session (no staging table; a stopped run resumes by recomputing)"
           if shown.pinned else
           f"staging {run_['staging_table']} ({'kept' if shown.staging_kept else 'not there: never written, or dropped'})"),
        highlight=False,
    )
    if run_["status"] in UNDER_WAY:
        console.print(f"{run_['status']}: running, or stopped (a run records its last steps with its commit, so a "
                      f"stopped run may have published already); `backfill resume {run_id}` finishes a stopped run "
                      "and finds a commit it made by run ID", highlight=False, soft_wrap=True)
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
    planned, started = planned_partitions_of(run_), len(shown.partitions)
    if planned is not None:
        console.print(f"partitions: {planned} planned, "
                      + ("all started (below)" if started >= planned else
                         f"{started} started (below), {planned - started} not started"), highlight=False)
    table = Table(title="Partitions", title_justify="left")
    for col in ("partition", "batch", "status", "rows", "attempt", "started (UTC)", "ended (UTC)", "message"):
        table.add_column(col)
    for p in shown.partitions:
        table.add_row(p["partition"], _s(p["batch"]), p["status"], _s(p["rows"]), _s(p["attempt"]),
                      _s(p["started_at"]), _s(p["ended_at"]), p["message"] or "")
    console.print(table)


def print_history(console: Console, table: str, versions: list) -> None:
    """``history``: the table's versions written by backfills, newest first."""
    out = Table(title=f"Backfill versions of {escape(table)} (newest first)", title_justify="left")
    for col in ("version", "committed", "action", "run ID", "run status", "strategy", "owner", "reason", "approved by", "detail"):
        out.add_column(col)
    for v in versions:
        out.add_row(str(v.version), v.timestamp, v.action, v.run_id, _s(v.status), _s(v.strategy), _s(v.owner),
                    _s(v.reason), _s(v.approved_by), _s(v.detail))
    console.print(out)
    if not versions:
        console.print(f"no version of {table} was written by a backfill", highlight=False, markup=False)


def print_cleanup(console: Console, done) -> None:
    """``cleanup``: the staging tables dropped (or that would be), and those kept with why."""
    chosen, kept, dry_run = done.chosen, done.kept, done.dry_run
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


def _s(v) -> str:
    return "" if v is None else str(v)


def _n(v) -> str:
    """A version as a sentence says it: ``none`` when there is none yet."""
    return "none" if v is None else str(v)


def print_demo(console: Console, result) -> None:
    """``demo``: the tables loaded (:class:`~backfill_lib.demo.DemoResult`) and what to run next."""
    console.print(f"demo.flights: {result.flights} ({result.flights_rows:,} rows)", highlight=False)
    state = ("Q1 arrival delays defective" if result.daily == "created"
             else "left as it is: if a backfill fixed it, `backfill demo --reset` restores the defect")
    console.print(f"demo.daily_route_delays: {result.daily} ({result.daily_rows:,} rows; {state})", highlight=False)
    console.print(f"demo.monthly_route_delays: {result.monthly} ({result.monthly_rows:,} rows; a mart of the daily "
                  "table, recomputed by the same backfill)", highlight=False)
    console.print("next: backfill plan conf/backfills/fix_daily_route_delays.yml  then  "
                  "backfill run conf/backfills/fix_daily_route_delays.yml", highlight=False)
