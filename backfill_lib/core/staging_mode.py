"""Where a run's staged rows wait for the publish commit: a durable staging table, or rows pinned in the session.

Pure: the choice depends on the request, the settings, how far the run goes and what the strategy and the session
can do. A **durable** run writes each batch into its staging Delta table, and publishing rewrites those rows into
the target: the rows are written twice, and a stopped run resumes from its staged batches. A **pinned** run holds
each batch's rows in its Spark session (``DataFrame.localCheckpoint``: computed once, kept by the session's block
manager, in memory and spilled to local disk), validates those and publishes them in the one commit: the rows are
written once, and nothing outlives the process, so a stopped run resumes by recomputing (its sources are read at
the versions the plan pinned).
"""

from __future__ import annotations

from dataclasses import dataclass

DURABLE = "durable"
PINNED = "pinned"


@dataclass(frozen=True)
class StagingChoice:
    """``mode`` (``durable`` or ``pinned``) and, when the run falls back from the asked ``pinned``, why."""

    mode: str
    fallback: str | None = None


def staging_mode(asked: str, *, until: str | None, can_pin: bool, reads_staged_batches: bool,
                 session_pins: bool) -> StagingChoice:
    """The staging mode of a run that asked for ``asked`` (the request's ``staging``, else the settings').

    Parameters
    ----------
    asked : str
        ``durable`` or ``pinned``.
    until : str or None
        ``validate`` when the run stops for review before publishing (its rows must outlive the process).
    can_pin : bool
        Whether the strategy publishes from staged rows of the range (a rebuild stages the whole table in a
        table of its own, which it swaps in).
    reads_staged_batches : bool
        Whether a batch reads earlier staged batches by name (``depends_on_past``).
    session_pins : bool
        Whether the session can pin rows (a classic session; Spark Connect sessions have no local checkpoint).

    Returns
    -------
    StagingChoice
        ``pinned`` only when asked and every condition allows it; otherwise ``durable``, with the reason when
        ``pinned`` was asked.
    """
    if asked != PINNED:
        return StagingChoice(DURABLE)
    for blocked, why in ((until == "validate", "the run stops for review (--until validate), so its rows must outlive it"),
                         (not can_pin, "the strategy stages the whole table in a table of its own"),
                         (reads_staged_batches, "depends_on_past batches read the earlier staged batches"),
                         (not session_pins, "the session cannot pin rows (Spark Connect)")):
        if blocked:
            return StagingChoice(DURABLE, f"staging durable, not pinned: {why}")
    return StagingChoice(PINNED)
