"""The dry run: render a plan for a person. Reads only the plan; writes nothing."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from backfill_lib.core.table_names import same_location, table_path
from backfill_lib.intake.schema_guard import changes_line
from backfill_lib.plan.generated import generated_line
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.core.staging_mode import PINNED
from backfill_lib.plan.kinds import kind_for

#: Longer partition lists show this many rows from each end.
EDGE_ROWS = 10
#: Longer ``IN`` lists of string partitions show this many values from each end.
EDGE_VALUES = 3


def human_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _rows(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def _marts_line(plan: BackfillPlan) -> str:
    """Each mart, in the order it is released, with the partitions covering the range it recomputes."""
    from backfill_lib.core.partitions import enumerate_partitions
    from backfill_lib.intake.request import mart_order

    r = plan.request
    lines = []
    for m in mart_order(r.marts):
        child = r.mart_request(m)
        parts = enumerate_partitions(*child.bounds(), m.grain, r.time_zone)
        lines.append(f"{m.table}: {len(parts):,} x {m.grain.value} ({parts[0].key} .. {parts[-1].key}), "
                     f"recomputed after the target publishes, same run ID")
    return "\n".join(lines) or "none"


def _zone_line(plan: BackfillPlan) -> str:
    """The Spark session time zone the run's SQL runs in, and the zone of its hour-partition writes."""
    line = f"session time zone {plan.session_time_zone} (the request's time_zone): every SQL of the run runs in it"
    if plan.write_time_zone != plan.session_time_zone:
        line += (f"; hour partitions are written in {plan.write_time_zone}, so each hour keeps its own partition "
                 "value (also the repeated hour of a daylight-saving fall-back)")
    return line


def layout_line(plan: BackfillPlan) -> str:
    """The target's partition spec and which column carries the range, of which type (and format)."""
    column = plan.partition_column
    spec = plan.partition_spec
    kind = next((c.type for c in plan.target_columns if c.name == column), None) or plan.request.target.grain.spark_type
    carried = f"{kind}, grain {plan.request.target.grain.value}"
    if plan.partition_format is not None:
        carried = f"{kind} in partition_format {plan.partition_format}, grain {plan.request.target.grain.value}"
    if plan.range_in_data:
        return _data_column_layout(plan, carried)
    if plan.date_parts:
        return _date_parts_layout(plan)
    if plan.wall_clock:
        carried += (f": wall-clock hours of {plan.request.time_zone}; an hour a daylight-saving spring-forward skips "
                    "is no partition, and the hour a fall-back repeats is one partition holding both")
    line = f"partitioned by ({', '.join(spec)}); the range is on {column} ({carried})"
    others = [c for c in spec if c != column]
    if others:
        line += (f", column {spec.index(column) + 1} of {len(spec)}; each partition's cost sums its files over "
                 f"{', '.join(others)}")
    return line


def target_line(plan: BackfillPlan) -> str:
    """The target and the version the plan read; for a path-based target (``delta.`<path>```), that layout: the
    table is found by its path, and stages into a catalog table of the staging schema named after the path."""
    line = f"{plan.target_table} at version {plan.target_version}"
    path = table_path(plan.target_table)
    if path is not None:
        line += (f" (path-based: the Delta table at {path}, no catalog entry; staged in {plan.staging_table}, "
                 "a table of the settings' staging_schema named after the path)")
    return line


def _data_column_layout(plan: BackfillPlan, carried: str) -> str:
    """The layout line of a range on a data column: spec, clustering, and where the cost comes from."""
    spec, clustering = plan.partition_spec, plan.clustering_columns
    line = f"partitioned by ({', '.join(spec)})" if spec else "not partitioned"
    if clustering:
        line += f", liquid-clustered by ({', '.join(clustering)}), kept by the publishing commit"
    line += (f"; the range is on data column {plan.partition_column} ({carried}), which is no partition column: "
             "each partition's cost counts the data files whose min/max statistics of the column overlap it "
             "(a file spanning several partitions counts in each, its rows unknown)")
    if plan.files_without_stats:
        line += (f"; {plan.files_without_stats:,} of the files have no statistics for the column, so they count in "
                 "every partition and their rows are unknown")
    return line


def _date_parts_layout(plan: BackfillPlan) -> str:
    """The layout line of integer date-part partition columns: which column holds which part, and how the
    range maps to them."""
    parts = plan.request.target.partition_columns
    named = ", ".join(f"{n}={getattr(parts, n)}" for n in ("year", "month", "day", "hour") if getattr(parts, n))
    others = [c for c in plan.partition_spec if c not in plan.date_parts]
    line = (f"partitioned by ({', '.join(plan.partition_spec)}); the range is on the integer date parts {named} "
            f"together, grain {plan.request.target.grain.value}: each partition is one value of each part")
    if plan.request.target.grain.value == "hour":
        line += f" (hour: the wall clock of {plan.request.time_zone})"
    if others:
        line += f"; each partition's cost sums its files over {', '.join(others)}"
    return line


def where_line(plan: BackfillPlan) -> str:
    """``target.where`` as the request writes it and as Spark analysed it, or that there is none."""
    if plan.where is None:
        return "none: every row of the range"
    return (f"{plan.where.text} (analysed: {plan.where.sql}); only the range's rows where it holds are staged, "
            "validated and published, the others are not touched, and a source row outside it fails the run")


def selection_text(plan: BackfillPlan) -> str:
    """``--only``'s selection: ``selection: --only missing: 12 of 90 partitions``, then why each is in it, runs of
    adjacent partitions with the same reason on one line (``2024-03-16 .. 2024-03-31 (16): no published run of
    this request``); or that nothing is selected."""
    sel = plan.selection
    head = f"selection: {sel.headline()}"
    if not sel.chosen:
        return (f"{head}: nothing is selected; `backfill run --only {sel.mode.value}` writes no table version and "
                "records no run")
    return "\n".join([head, *(f"  {line}" for line in sel.describe())])


#: The pins line of a query that names no Delta table outside ``table_changes(...)``: a change feed's versions
#: are fixed by the query itself (intake refuses one read up to the latest version).
NO_PINS = "none (the query names no Delta table outside table_changes, whose version range the query fixes)"


def _pins_line(plan: BackfillPlan) -> str:
    pins = plan.source_versions
    if pins is None:
        return "pinned when the run starts"
    if not pins:
        return NO_PINS
    listed = ", ".join(f"{s.table} version {s.version}" for s in pins)
    return f"{listed} (read at these versions for the whole run; the run pins them again when it starts)"


def batches_line(plan: BackfillPlan) -> str:
    """How the partitions are batched: ``3 of up to 10 partitions each``, or where every batch has the same size
    ``4 of 1 partition each`` (``depends_on_past``) / ``1 of 5 partitions``; ``none`` without partitions."""
    sizes = [len(b.partitions) for b in plan.batches]
    if not sizes:
        return "none"
    most = max(sizes)
    noun = "partition" if most == 1 else "partitions"
    if len(sizes) == 1:
        return f"1 of {most} {noun}"
    return f"{len(sizes)} of {most} {noun} each" if min(sizes) == most else f"{len(sizes)} of up to {most} {noun} each"


def past_line(plan: BackfillPlan) -> str | None:
    """What the plan says of the order of its batches: for ``depends_on_past``, that they run in order, one
    partition at a time, each reading the staged previous partition of the target; for a source SQL that reads
    the target (a pinned source at the target's location) without it, that it reads the target's old rows;
    ``None`` otherwise."""
    if plan.request.depends_on_past:
        return (f"depends_on_past: batches run in order, one partition at a time (concurrency 1); each reads the "
                f"staged previous partitions of {plan.target_table} instead of the published ones (its other rows "
                f"at version {plan.target_version}); a resume continues from the first unstaged partition")
    if any(same_location(s.location, plan.target_location) for s in plan.source_versions or ()):
        return (f"the source SQL reads {plan.target_table} itself, at version {plan.target_version} (its rows before "
                "this run); if a partition derives from an earlier partition of the range, set depends_on_past")
    return None


def staging_line(plan: BackfillPlan) -> str:
    """Where the run's staged rows wait for the publish commit, and why (:mod:`backfill_lib.core.staging_mode`).

    The staging table is named with ``<run ID>`` in place of the plan's ID: ``backfill run`` plans again under a run
    ID of its own, and its staging table carries that one."""
    why = f" ({plan.staging_reason})" if plan.staging_reason else ""
    table = staging_table_of_any_run(plan)
    if plan.staging_mode == PINNED:
        return (f"pinned in the run's Spark session{why}: validated, then written once, by the publish commit (no "
                "staging table; a stopped run resumes by recomputing; with `--until validate` it stages durably in "
                f"{table})")
    return f"durable{why}: staging table {table} (kept for review and resume; publishing rewrites its rows)"


def staging_table_of_any_run(plan: BackfillPlan) -> str:
    """``plan``'s staging table with its trailing run ID (before a closing back-quote, if any) shown as
    ``<run ID>``: what ``backfill plan`` names, since ``backfill run`` plans again under a run ID of its own."""
    table, run_id = plan.staging_table, plan.run_id
    quote = "`" if table.endswith("`") else ""
    body = table[:len(table) - len(quote)]
    return body[:-len(run_id)] + "<run ID>" + quote if body.endswith(run_id) else table


def explain(plan: BackfillPlan) -> Group:
    """A renderable of the plan: what, why, which partitions, their current cost, where rows are staged."""
    r = plan.request
    strategy = kind_for(r.strategy, r.publish_mode)
    parts = plan.partitions
    total = plan.total
    src = plan.source_input
    source_line = (
        f"unknown: {src.why_unknown} (not 0 files: batches without a batch_size are sized by the target's bytes "
        "in range)" if src.why_unknown is not None
        else "not file-based" if src.files is None
        else f"{src.files:,} files, {human_bytes(src.bytes)} for the whole range (file metadata after pruning)"
    )
    range_line = (
        f"[{plan.range_start}, {plan.range_end})  (inclusive {r.range.start} .. {r.range.end})" if r.range
        else "the whole table (rebuild)"
    )
    first_last = f"first {parts[0].key}, last {parts[-1].key}" if parts else "none yet"
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, value in [
        ("request", f"{r.name} ({plan.request_path})"),
        ("owner / reason", f"{r.owner} / {r.reason}"),
        ("target", target_line(plan)),
        ("strategy", strategy.describe(plan)),
        ("layout", layout_line(plan)),
        ("where", where_line(plan)),
        *([("generated columns", generated_line(plan))] if plan.target_generated else []),
        *([("schema changes", changes_line(plan.schema_changes, r.schema_changes == "allow"))]
          if strategy.whole_table else []),
        ("publish statement", strategy.publish_statement(plan, shown=EDGE_VALUES) if parts or strategy.whole_table else "none (no partitions)"),
        ("partitions", f"{len(parts):,} x {r.target.grain.value} on {plan.partition_column} "
                       f"(time zone {r.time_zone}), {first_last}"),
        *([("selection", selection_text(plan))] if plan.selection is not None else []),
        ("range", range_line),
        ("time zone", _zone_line(plan)),
        ("current data in range", f"{total.files:,} files, {human_bytes(total.bytes)}, {_rows(total.rows)} rows "
                                  "(from the Delta log)"),
        ("source input", source_line),
        ("change data feed", strategy.change_feed(plan)),
        ("source versions", _pins_line(plan)),
        ("row-count gate", f"a partition losing more than {r.gates.max_row_loss_fraction:.0%} of its rows blocks "
                           f"publishing{' (allowed by the request)' if r.gates.allow_row_loss else ''}"),
        ("batches", batches_line(plan)),
        ("staging", staging_line(plan)),
        ("expectation suite", str(r.expectations or "none")),
        ("reconciliation", ", ".join(rule.name for rule in r.reconciliation) or "none"),
        ("downstream marts", _marts_line(plan)),
        *([("order", order)] if (order := past_line(plan)) else []),
        ("concurrency", "1 batch at a time (depends_on_past)" if r.depends_on_past
         else f"{r.concurrency} batches at once" if r.concurrency else "from settings"),
        ("plan ID", f"{plan.run_id} (`backfill run` plans again and gets its own run ID)"),
    ]:
        head.add_row(label, Text(value))  # as text: a name or predicate holding [x] is no console markup
    table = Table(title="Partitions touched (current target, from the Delta log)", title_justify="left")
    for name, justify in (("partition", "left"), ("batch", "right"), ("files", "right"), ("bytes", "right"), ("rows", "right")):
        table.add_column(name, justify=justify)
    batch_of = {p.key: b.index for b in plan.batches for p in b.partitions}
    shown = parts if len(parts) <= 2 * EDGE_ROWS else parts[:EDGE_ROWS] + parts[-EDGE_ROWS:]
    for i, p in enumerate(shown):
        if len(parts) > 2 * EDGE_ROWS and i == EDGE_ROWS:
            table.add_row(f"... {len(parts) - 2 * EDGE_ROWS:,} more", "", "", "", "")
        c = p.current
        table.add_row(p.key, str(batch_of[p.key]), f"{c.files:,}", human_bytes(c.bytes), _rows(c.rows))
    table.add_row("total", "", f"{total.files:,}", human_bytes(total.bytes), _rows(total.rows), style="bold")
    return Group(Text("Backfill plan (dry run: nothing is written)", style="bold underline"), head, table)
