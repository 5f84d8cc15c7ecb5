"""``--only missing|failed|changed``: which partitions of a request's range a run takes, and why. Pure.

The effectful side (:mod:`backfill_lib.plan.selection`) gathers the facts: the runs of the same request (same
``request_name`` and same target table in the ledger) as :class:`RunFacts`, and for ``changed`` whether the source
files each partition reads changed since its last published run. :func:`select` turns them into a
:class:`Selection`, one reason per selected partition; the frozen plan carries it and batches only the selected
partitions (a batch never spans an unselected one).

The modes, per partition of the range (``key``):

``missing``
    No run of the request that covers ``key`` is final and published: none, or each one failed, was rolled back,
    abandoned, cancelled or is still running. A run recorded ``unchanged`` (its staged rows equalled the target's)
    counts as covering; a published run later rolled back does not, nor one undone by a forced rollback of an
    earlier run (:func:`holding_run`).
``failed``
    The latest run covering ``key`` (by when it was planned) ended ``failed`` (a gate, an error), ``rolled_back``,
    ``abandoned`` or ``cancelled``: every way a run ends, or stops, without its rows staying published. A partition
    no run covered is not selected (that is ``missing``), nor one whose latest run is still in progress (its lease
    keeps a new run off the range anyway).
``changed``
    The source files the partition's reads take (source SQL and rule tables) differ from those the partition's
    last published run read at the versions it pinned; a partition no run published counts as changed, and so does
    one whose change cannot be told (a source that is no pinned Delta table, a pinned version no longer readable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum


class OnlyMode(str, Enum):
    """What ``--only`` selects."""

    MISSING = "missing"
    FAILED = "failed"
    CHANGED = "changed"


#: Final statuses whose rows stay in the target: the run covers its partitions.
COVERING = ("published", "unchanged")
#: Statuses of a run that ended, or stopped, without its rows staying published (``--only failed``).
FAILED_STATUSES = ("failed", "rolled_back", "abandoned", "cancelled")


@dataclass(frozen=True)
class RunFacts:
    """One run of the request as the ledger folds it: its latest ``status``, ``order`` (the ``seq`` of its
    ``planned`` event: larger is later), the partition keys it planned (``keys``: the plan's batches) and
    ``ended``."""

    run_id: str
    status: str
    order: int
    keys: frozenset[str]
    #: the ``seq`` of its latest event (when it became what ``status`` says); ``0`` when unknown
    ended: int = 0


@dataclass(frozen=True)
class Chosen:
    """A selected partition: its position in the range's partitions (0-based), key and why it is selected."""

    index: int
    key: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The partitions ``--only mode`` selected of the ``total`` partitions of the range, in range order."""

    mode: OnlyMode
    total: int
    chosen: tuple[Chosen, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.chosen)

    def headline(self) -> str:
        """``--only missing: 12 of 90 partitions``."""
        return f"--only {self.mode.value}: {len(self.chosen):,} of {self.total:,} partitions"

    def groups(self) -> list[tuple[str, str, int, str]]:
        """Runs of consecutive partitions (adjacent in the range) with the same reason, as ``(first key, last key,
        count, reason)``, in range order."""
        out: list[list] = []
        previous = None
        for c in self.chosen:
            if out and previous is not None and c.index == previous.index + 1 and c.reason == previous.reason:
                out[-1][1] = c.key
                out[-1][2] += 1
            else:
                out.append([c.key, c.key, 1, c.reason])
            previous = c
        return [tuple(g) for g in out]

    def describe(self, limit: int = 20) -> list[str]:
        """One line per group (:meth:`groups`), at most ``limit`` (then a last line says how many more)."""
        lines = []
        groups = self.groups()
        for first, last, n, reason in groups[:limit]:
            span = first if n == 1 else f"{first} .. {last} ({n})"
            lines.append(f"{span}: {reason}")
        if len(groups) > limit:
            lines.append(f"... and {len(groups) - limit} more groups")
        return lines

    def to_json(self) -> dict:
        """JSON-ready (stored with the plan in the ledger); :meth:`from_json` reads it back."""
        return {"mode": self.mode.value, "total": self.total,
                "chosen": [[c.index, c.key, c.reason] for c in self.chosen]}

    @classmethod
    def from_json(cls, data: dict) -> "Selection":
        return cls(OnlyMode(data["mode"]), int(data["total"]),
                   tuple(Chosen(int(i), str(k), str(r)) for i, k, r in data["chosen"]))


def latest_run(key: str, runs: Iterable[RunFacts], statuses: Sequence[str] | None = None) -> RunFacts | None:
    """The latest run (largest ``order``) of ``runs`` whose keys hold ``key`` (and whose status is one of
    ``statuses``, when given); ``None`` when there is none."""
    found = [r for r in runs if key in r.keys and (statuses is None or r.status in statuses)]
    return max(found, key=lambda r: (r.order, r.run_id)) if found else None


def holding_run(key: str, runs: Sequence[RunFacts]) -> RunFacts | None:
    """The run whose rows partition ``key`` holds now, as far as the ledger tells: the run covering ``key`` that
    became ``published`` or ``unchanged`` (:data:`COVERING`) last, passing over one that a later rollback undid: a
    run planned before it and rolled back after it ended restored the table to a version before it (a forced
    rollback undoes later commits too). ``None`` when no run holds it."""
    rolled = [r for r in runs if key in r.keys and r.status == "rolled_back"]
    covering = sorted((r for r in runs if key in r.keys and r.status in COVERING),
                      key=lambda r: (r.ended, r.order, r.run_id), reverse=True)
    for run in covering:
        if not any(x.order < run.order and x.ended > run.ended for x in rolled):
            return run
    return None


def last_published(keys: Iterable[str], runs: Sequence[RunFacts]) -> dict[str, RunFacts | None]:
    """Per key: :func:`holding_run`."""
    return {k: holding_run(k, runs) for k in keys}


#: the reason of a partition no run of the request published
NEVER_PUBLISHED = "no published run of this request"


def select(mode: OnlyMode | str, keys: Sequence[str], runs: Sequence[RunFacts],
           changes: Mapping[str, str | None] | None = None) -> Selection:
    """The partitions of ``keys`` (the range's partition keys, in order) that ``mode`` selects, each with its
    reason (see the module docstring).

    ``changes`` (``changed`` only): per key whose last published run exists, why its source changed, or ``None``
    when it did not; a key missing from ``changes`` is selected (not inspected). Raises ``ValueError`` for an
    unknown mode."""
    mode = OnlyMode(mode)
    chosen = []
    for i, key in enumerate(keys):
        reason = None
        if mode is OnlyMode.MISSING:
            if holding_run(key, runs) is None:
                last = latest_run(key, runs)
                reason = NEVER_PUBLISHED + ("" if last is None else f" (last run {last.run_id}: {last.status}"
                                            + (", undone by a later rollback)" if last.status in COVERING else ")"))
        elif mode is OnlyMode.FAILED:
            last = latest_run(key, runs)
            if last is not None and last.status in FAILED_STATUSES:
                reason = f"last run {last.run_id} {last.status}"
        else:
            published = holding_run(key, runs)
            if published is None:
                reason = NEVER_PUBLISHED
            elif changes is None or key not in changes:
                reason = f"source changes since run {published.run_id} not inspected"
            else:
                reason = changes[key]
        if reason is not None:
            chosen.append(Chosen(i, key, reason))
    return Selection(mode, len(keys), tuple(chosen))


def contiguous(indices: Sequence[int]) -> list[list[int]]:
    """``indices`` (increasing) split into runs of consecutive integers: ``[1, 2, 5, 6, 7]`` ->
    ``[[1, 2], [5, 6, 7]]``."""
    out: list[list[int]] = []
    for i in indices:
        if out and i == out[-1][-1] + 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out
