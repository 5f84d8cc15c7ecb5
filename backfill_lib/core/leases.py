"""One backfill at a time per target range: the lease a run holds from its ``planned`` event until it is final.
Pure.

A run's lease is its ``planned`` ledger event itself (the plan JSON names the table, the range and ``where``), so
it is written in the same commit that records the plan. A run holds its lease while it is not final: from
``planned`` through ``staging``, ``validating``, ``validated`` and ``publishing``, and also when ``cancelled`` or
``failed`` by an error that may pass on a retry (``backfill resume`` continues both;
:func:`~backfill_lib.core.errors.resumable_failure`). ``published``, ``unchanged``, ``rolled_back`` and
``abandoned`` (``backfill abandon``) release it, and so does a failure by a refusal that would repeat (a gate,
stray rows, the fence: exit 2 to 4), and age: a lease whose run recorded nothing for ``lease_hours`` (settings)
has expired (a crashed run nobody resumed).

Two leases conflict when they are on the same table (:func:`~backfill_lib.core.table_names.same_table_key`, or the
same data path under another name: :attr:`Lease.location`) and their ranges overlap, either as half-open intervals
of instants (a day starts at midnight in its request's ``time_zone``) or as intervals of wall-clock time (the dates
and hours as each request reads them): a ``DATE``, ``yyyyMMdd``, integer date-part or ``TIMESTAMP_NTZ`` hour partition is the same partition
in every zone, so two requests for 2024-03-02 conflict even when their zones are a day apart, while an hour range of
a ``TIMESTAMP`` column is compared in instants only (:func:`in_instants`); a rebuild, or a run without a range,
covers the whole table. ``target.where`` is not compared: two runs on the same days of different regions still
conflict (the check is conservative; ``--concurrent`` overrides it, and the fence still guards each publish).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from backfill_lib.core.partitions import zone
from backfill_lib.core.table_names import same_location, same_table_key

#: Statuses after which a run holds no lease.
RELEASED = ("published", "unchanged", "rolled_back", "abandoned")


@dataclass(frozen=True)
class Lease:
    """A run's claim on ``table``'s range ``[start, end)`` (UTC instants; ``None``: the whole table)."""

    run_id: str
    table: str
    owner: str
    status: str
    start: datetime | None
    end: datetime | None
    #: the ``seq`` of the run's ``planned`` event (nanoseconds since the epoch): which of two leases came first
    planned_seq: int
    #: when the run recorded its latest event (UTC)
    last_event_at: datetime
    #: the range as its request reads (``[2024-03-01, 2024-04-01) America/New_York``; ``the whole table``)
    shown: str = ""
    #: for a ``failed`` run: whether its error may pass on a retry (``None``: not recorded, taken as yes)
    resumable: bool | None = None
    #: the range in wall-clock time of its request's zone (naive; a date is its midnight), compared beside the
    #: instants because a date-keyed partition does not move with the zone
    wall_start: datetime | None = None
    wall_end: datetime | None = None
    #: the table's data path as its plan read it: two spellings of one table (``sales.events``,
    #: ``spark_catalog.sales.events``, ``delta.`<its path>```) share it
    location: str = ""

    @property
    def held(self) -> bool:
        """Whether the run's status holds the lease (age aside): not final, and not failed by a refusal that
        would repeat."""
        return self.status not in RELEASED and not (self.status == "failed" and self.resumable is False)

    def overlaps(self, other: "Lease") -> bool:
        """Whether the two leases are on the same table (by name or by location) and their ranges share an
        instant, or wall-clock time where both compare it."""
        if same_table_key(self.table) != same_table_key(other.table) and not same_location(self.location,
                                                                                           other.location):
            return False
        if self.start is None or other.start is None:
            return True
        if self.start < other.end and other.start < self.end:
            return True
        if None in (self.wall_start, self.wall_end, other.wall_start, other.wall_end):
            return False
        return self.wall_start < other.wall_end and other.wall_start < self.wall_end

    def span(self) -> str:
        """The range as people read it: ``[2024-03-01, 2024-04-01) America/New_York``, or ``the whole table``."""
        if self.start is None:
            return "the whole table"
        return self.shown or f"[{self.start.isoformat()}, {self.end.isoformat()})"

    def expired(self, now: datetime, lease_hours: float) -> bool:
        """Whether the run recorded nothing for ``lease_hours`` up to ``now`` (UTC)."""
        return now - self.last_event_at > timedelta(hours=lease_hours)


def _instant(text: str | None, time_zone: str) -> datetime | None:
    """A plan bound (``2024-03-09`` or an ISO timestamp) as a UTC instant; a date starts at midnight in
    ``time_zone``."""
    if text in (None, "None"):
        return None
    if "T" in text or " " in text or "+" in text:
        value = datetime.fromisoformat(text.replace(" ", "T"))
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    day = date.fromisoformat(text)
    return datetime(day.year, day.month, day.day, tzinfo=zone(time_zone)).astimezone(timezone.utc)


def _wall(text: str | None, time_zone: str) -> datetime | None:
    """A plan bound as naive wall-clock time in ``time_zone`` (a date: its midnight)."""
    instant = _instant(text, time_zone)
    return None if instant is None else instant.astimezone(zone(time_zone)).replace(tzinfo=None)


def in_instants(target: dict, column_type: str | None = None) -> bool:
    """Whether a range of the request ``target`` (its fields: ``grain``, ``partition_format``,
    ``partition_columns``) names the same rows in every zone only as instants: an hour range of a ``TIMESTAMP``
    column. A date, or an hour written as a string, integer parts or a ``TIMESTAMP_NTZ`` (``column_type``, the
    range column's Spark type where known), is the same partition at the same wall-clock time in every zone."""
    return (target.get("grain") == "hour" and not target.get("partition_format")
            and not target.get("partition_columns") and column_type != "timestamp_ntz")


def make_lease(run_id: str, table: str, owner: str, status: str, *, whole: bool, start: object, end: object,
               time_zone: str, planned_seq: int, last_event_at: datetime, resumable: bool | None = None,
               wall_clock: bool = True, location: str = "") -> Lease:
    """A lease from a plan's fields: ``start``/``end`` its half-open bounds (dates, datetimes or their ISO text;
    a date starts at midnight in ``time_zone``), ``whole`` for a rebuild or a run without a range;
    ``wall_clock``: also compared as wall-clock time (``not in_instants(target)``); ``location``: the table's data
    path (the plan's ``target_location``)."""
    low = None if whole else _instant(None if start is None else str(start), time_zone)
    high = None if whole else _instant(None if end is None else str(end), time_zone)
    if low is None or high is None:
        low = high = None
    last = last_event_at if last_event_at.tzinfo else last_event_at.replace(tzinfo=timezone.utc)
    shown = "the whole table" if low is None else f"[{start}, {end}) {time_zone}"
    walls = (None, None)
    if low is not None and wall_clock:
        walls = (_wall(str(start), time_zone), _wall(str(end), time_zone))
    return Lease(run_id, table, owner or "?", status, low, high, planned_seq, last.astimezone(timezone.utc), shown,
                 resumable, *walls, location or "")


def lease_of(run: dict) -> Lease:
    """The lease of ``run``: a ledger run record with ``plan_json``, its latest ``status`` and ``event_at``, and
    ``planned_seq`` (the ``seq`` of its first event).

    The lease is the whole table when the stored plan says its strategy writes the whole table
    (``whole_table``), when the request has no range, or when the plan does not say (a plan stored by an older
    version of the tool: holding the whole table can only refuse a run that would have been let through)."""
    summary = json.loads(run["plan_json"])
    request = summary["request"]
    return make_lease(run["run_id"], request["target"]["table"], run.get("owner") or "?", run["status"],
                      whole=summary.get("whole_table", True) or not request.get("range"),
                      start=summary.get("range_start"), end=summary.get("range_end_exclusive"),
                      time_zone=request.get("time_zone") or "UTC", planned_seq=int(run["planned_seq"]),
                      last_event_at=run["event_at"], resumable=run.get("resumable"),
                      wall_clock=not in_instants(request["target"], _range_type(summary)),
                      location=summary.get("target_location") or "")


def _range_type(summary: dict) -> str | None:
    """The Spark type of the range's column in a stored plan summary (``None`` when it does not record it)."""
    column = summary["request"]["target"].get("partition_column")
    return next((c.get("type") for c in summary.get("target_columns") or () if c.get("name") == column), None)


def holding(leases: list[Lease], mine: Lease, now: datetime, lease_hours: float) -> list[Lease]:
    """The leases of ``leases`` (other runs) that ``mine`` conflicts with: not released, not expired,
    overlapping; oldest first."""
    found = [lease for lease in leases
             if lease.run_id != mine.run_id and lease.held and not lease.expired(now, lease_hours)
             and lease.overlaps(mine)]
    return sorted(found, key=lambda lease: (lease.planned_seq, lease.run_id))


def committed_before(held: list[Lease], mine: Lease, planned_commits: dict[str, int]) -> list[Lease]:
    """The leases of ``held`` whose run's plan reached the ledger before ``mine``'s did.

    ``planned_commits`` maps run IDs to the ``runs`` table version of the commit holding their ``planned``
    event, for the plans committed since the caller's turn
    (:meth:`~backfill_lib.ledger.writer.EventWriter.planned_commits`). Commit order decides when both plans
    are in it: a run stamps its plan's ``planned_seq`` from its own clock when recording it, which may commit
    later than a plan stamped after it, and then each of the two would see the other as the later one. Plans in
    one commit, and a run missing from it (its plan committed before the turn, as a resumed run's, or in a commit
    that names no runs: an older release) fall back to ``(planned_seq, run_id)``. Oldest first, as
    :func:`holding`.
    """
    own = planned_commits.get(mine.run_id)

    def earlier(lease: Lease) -> bool:
        theirs = planned_commits.get(lease.run_id)
        if own is not None and theirs is not None and theirs != own:
            return theirs < own
        return (lease.planned_seq, lease.run_id) < (mine.planned_seq, mine.run_id)

    return [lease for lease in held if earlier(lease)]


def refusal(mine: Lease, held: list[Lease], lease_hours: float) -> str:
    """The one-line refusal of ``mine`` because of ``held`` (non-empty, oldest first)."""
    first = held[0]
    more = f" (and {len(held) - 1} more: {', '.join(h.run_id for h in held[1:])})" if len(held) > 1 else ""
    return (f"table {mine.table}: run {first.run_id} (owner {first.owner}, status {first.status}) holds "
            f"{first.span()}, which overlaps this run's {mine.span()}{more}; finish it (`backfill resume "
            f"{first.run_id}`), wait for it (--after {first.run_id}), release it (`backfill abandon {first.run_id} "
            f"--reason TEXT`) or run beside it (--concurrent); a lease also expires {lease_hours:g} hours after its "
            "run's last event")


def wait_is_over(status: str, lease: Lease | None, now: datetime, lease_hours: float) -> bool:
    """Whether ``--after`` stops waiting for a run whose latest status is ``status`` and whose lease is ``lease``
    (``None``: it has none): when the run is final, holds no lease (a refusal that would repeat) or its lease
    expired (no event for ``lease_hours`` up to ``now``, UTC). The run's table plays no part (see
    :func:`after_note`)."""
    return status in RELEASED or lease is None or not lease.held or lease.expired(now, lease_hours)


def after_note(run_id: str, its_table: str, table: str) -> str | None:
    """What ``--after run_id`` says when that run backfills ``its_table``, another table than this request's
    ``table`` (compared by :func:`~backfill_lib.core.table_names.same_table_key`); ``None`` for the same table.

    Such a wait is allowed: it orders this run after that one (an upstream table whose rows this request's source
    reads), but it frees nothing on ``table``, whose runs this run's own lease check still meets."""
    if same_table_key(its_table) == same_table_key(table):
        return None
    return (f"run {run_id} backfills {its_table}, not {table}: waiting orders this run after it (use it when this "
            f"request reads {its_table}); it holds no range of {table}")
