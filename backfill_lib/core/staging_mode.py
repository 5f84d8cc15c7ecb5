"""Where a run's staged rows wait for the publish commit: a durable staging table, or rows pinned in the session.

Pure: the choice depends on the request, the settings, how far the run goes and what the strategy and the session
can do. A **durable** run writes each batch into its staging Delta table, and publishing rewrites those rows into
the target: the rows are written twice, and a stopped run resumes from its staged batches. A **pinned** run holds
each batch's rows in its Spark session (``DataFrame.localCheckpoint``: computed once, kept by the session's block
manager, in memory and spilled to local disk), validates those and publishes them in the one commit: the rows are
written once, and nothing outlives the process, so a stopped run resumes by recomputing (its sources are read at
the versions the plan pinned).

**auto** (the default) pins a run that goes straight through in one batch, and stages every other run durably: a
run of several batches resumes from the batches it staged, and its rows need not all wait in one process until
the commit.
"""

from __future__ import annotations

from dataclasses import dataclass

AUTO = "auto"
DURABLE = "durable"
PINNED = "pinned"


@dataclass(frozen=True)
class StagingChoice:
    """``mode`` (``durable`` or ``pinned``); ``fallback``: when the run falls back from an asked ``pinned``, the
    line that says so; ``reason``: why ``auto`` or the fall-back chose ``mode`` (``None`` for a mode asked and kept)."""

    mode: str
    fallback: str | None = None
    reason: str | None = None


def staging_mode(asked: str, *, until: str | None, can_pin: bool, reads_staged_batches: bool,
                 session_pins: bool, batches: int = 1) -> StagingChoice:
    """The staging mode of a run that asked for ``asked`` (the request's ``staging``, else the settings').

    Parameters
    ----------
    asked : str
        ``auto``, ``durable`` or ``pinned``.
    until : str or None
        ``validate`` when the run stops for review before publishing (its rows must outlive the process).
    can_pin : bool
        Whether the strategy publishes from staged rows of the range (a rebuild stages the whole table in a
        table of its own, which it swaps in).
    reads_staged_batches : bool
        Whether a batch reads earlier staged batches by name (``depends_on_past``).
    session_pins : bool
        Whether the session can pin rows (a classic session; Spark Connect sessions have no local checkpoint).
    batches : int
        The run's batches (``auto`` pins one only).

    Returns
    -------
    StagingChoice
        ``pinned`` when asked (``pinned``, or ``auto`` for one batch) and every condition allows it; otherwise
        ``durable``, with the reason when ``pinned`` or ``auto`` was asked.
    """
    if asked == DURABLE:
        return StagingChoice(DURABLE)
    for blocked, why in ((until == "validate", "the run stops for review (--until validate), so its rows must outlive it"),
                         (not can_pin, "the strategy stages the whole table in a table of its own"),
                         (reads_staged_batches, "depends_on_past batches read the earlier staged batches"),
                         (not session_pins, "the session cannot pin rows (Spark Connect)"),
                         (asked == AUTO and batches > 1,
                          f"{batches} batches: a stopped run resumes from the batches it staged")):
        if blocked:
            if asked == AUTO:
                return StagingChoice(DURABLE, reason=why)
            return StagingChoice(DURABLE, f"staging durable, not pinned: {why}", why)
    if asked == AUTO:
        return StagingChoice(PINNED, reason="one batch, straight through")
    return StagingChoice(PINNED)
