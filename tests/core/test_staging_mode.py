"""Which staging mode a run uses (pure): pinned where asked (``pinned``, or ``auto`` for one batch) and every
condition allows it."""

import pytest

from backfill_lib.core.staging_mode import StagingChoice, staging_mode

OK = dict(until=None, can_pin=True, reads_staged_batches=False, session_pins=True, batches=1)


@pytest.mark.parametrize("asked, changes, expected", [
    ("durable", {}, StagingChoice("durable")),
    ("durable", {"until": "validate", "session_pins": False}, StagingChoice("durable")),
    ("pinned", {}, StagingChoice("pinned")),
    ("pinned", {"until": "validate"}, StagingChoice(
        "durable", "staging durable, not pinned: the run stops for review (--until validate), so its rows must outlive it",
        "the run stops for review (--until validate), so its rows must outlive it")),
    ("pinned", {"can_pin": False}, StagingChoice(
        "durable", "staging durable, not pinned: the strategy stages the whole table in a table of its own",
        "the strategy stages the whole table in a table of its own")),
    ("pinned", {"reads_staged_batches": True}, StagingChoice(
        "durable", "staging durable, not pinned: depends_on_past batches read the earlier staged batches",
        "depends_on_past batches read the earlier staged batches")),
    ("pinned", {"session_pins": False}, StagingChoice(
        "durable", "staging durable, not pinned: the session cannot pin rows (Spark Connect)",
        "the session cannot pin rows (Spark Connect)")),
    ("pinned", {"batches": 40}, StagingChoice("pinned")),
    ("auto", {}, StagingChoice("pinned", reason="one batch, straight through")),
    ("auto", {"batches": 3}, StagingChoice(
        "durable", reason="3 batches: a stopped run resumes from the batches it staged")),
    ("auto", {"until": "validate"}, StagingChoice(
        "durable", reason="the run stops for review (--until validate), so its rows must outlive it")),
    ("auto", {"can_pin": False}, StagingChoice(
        "durable", reason="the strategy stages the whole table in a table of its own")),
    ("auto", {"session_pins": False}, StagingChoice(
        "durable", reason="the session cannot pin rows (Spark Connect)")),
])
def test_the_staging_mode_of_a_run(asked, changes, expected):
    assert staging_mode(asked, **{**OK, **changes}) == expected
