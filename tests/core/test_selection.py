"""``--only missing|failed|changed``: the pure selection (no Spark)."""

from __future__ import annotations

import pytest

from backfill_lib.core.selection import (
    NEVER_PUBLISHED,
    Chosen,
    OnlyMode,
    RunFacts,
    Selection,
    contiguous,
    last_published,
    select,
)

KEYS = [f"2024-01-0{d}" for d in range(1, 9)]  # 8 days


def run(run_id, status, order, keys, ended=None):
    return RunFacts(run_id, status, order, frozenset(keys), order if ended is None else ended)


def picked(selection: Selection) -> dict[str, str]:
    return {c.key: c.reason for c in selection.chosen}


def test_missing_is_what_no_published_or_unchanged_run_covers():
    runs = [
        run("a", "published", 1, KEYS[:3]),  # days 1-3 published
        run("b", "rolled_back", 2, KEYS[3:5]),  # days 4-5: published, then rolled back: not covered
        run("c", "unchanged", 3, KEYS[5:6]),  # day 6: staged rows equalled the target's: covered
        run("d", "failed", 4, KEYS[:2]),  # a later failure does not uncover days 1-2
        run("e", "published", 5, KEYS[7:]),  # day 8: published, then republished by f and f rolled back: the
        run("f", "rolled_back", 6, KEYS[7:]),  # RESTORE put e's rows back, so e still covers it
        run("g", "rolled_back", 7, KEYS[6:7], ended=10),  # day 7: h published after g, then g's forced
        run("h", "published", 8, KEYS[6:7], ended=9),  # rollback restored the table to before g, undoing h
    ]
    sel = select("missing", KEYS, runs)
    assert picked(sel) == {
        "2024-01-04": NEVER_PUBLISHED + " (last run b: rolled_back)",
        "2024-01-05": NEVER_PUBLISHED + " (last run b: rolled_back)",
        "2024-01-07": NEVER_PUBLISHED + " (last run h: published, undone by a later rollback)",
    }
    assert [c.index for c in sel.chosen] == [3, 4, 6]
    assert sel.headline() == "--only missing: 3 of 8 partitions"
    assert sel.describe() == [
        f"2024-01-04 .. 2024-01-05 (2): {NEVER_PUBLISHED} (last run b: rolled_back)",
        f"2024-01-07: {NEVER_PUBLISHED} (last run h: published, undone by a later rollback)",
    ]


def test_failed_follows_the_latest_run_covering_each_partition():
    runs = [
        run("a", "failed", 1, KEYS[:4]),
        run("b", "published", 2, KEYS[2:4]),  # days 3-4 fixed since
        run("c", "cancelled", 3, KEYS[4:5]),
        run("d", "abandoned", 4, KEYS[5:6]),
        run("e", "staging", 5, KEYS[6:7]),  # still in progress: not failed
    ]
    assert picked(select(OnlyMode.FAILED, KEYS, runs)) == {
        "2024-01-01": "last run a failed", "2024-01-02": "last run a failed",
        "2024-01-05": "last run c cancelled", "2024-01-06": "last run d abandoned",
    }  # day 8: never run, that is --only missing


def test_changed_takes_never_published_and_what_the_facts_say_changed():
    runs = [run("a", "published", 1, KEYS[:4]), run("b", "published", 2, KEYS[2:6]),
            run("c", "rolled_back", 3, KEYS[6:7])]
    assert last_published(KEYS[1:3], runs) == {"2024-01-02": runs[0], "2024-01-03": runs[1]}
    changes = {k: None for k in KEYS[:6]} | {"2024-01-04": "source files changed since run b (x)"}
    del changes["2024-01-06"]  # not inspected: selected, saying so
    assert picked(select("changed", KEYS, runs, changes)) == {
        "2024-01-04": "source files changed since run b (x)",
        "2024-01-06": "source changes since run b not inspected",
        "2024-01-07": NEVER_PUBLISHED, "2024-01-08": NEVER_PUBLISHED,
    }


def test_groups_join_only_adjacent_partitions_with_the_same_reason_and_json_round_trips():
    sel = Selection(OnlyMode.MISSING, 10, (Chosen(0, "k0", "x"), Chosen(1, "k1", "x"), Chosen(2, "k2", "y"),
                                           Chosen(4, "k4", "y"), Chosen(5, "k5", "y")))
    assert sel.groups() == [("k0", "k1", 2, "x"), ("k2", "k2", 1, "y"), ("k4", "k5", 2, "y")]
    assert sel.describe(limit=2) == ["k0 .. k1 (2): x", "k2: y", "... and 1 more groups"]
    assert Selection.from_json(sel.to_json()) == sel
    assert contiguous([1, 2, 5, 6, 7, 9]) == [[1, 2], [5, 6, 7], [9]]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError):
        select("stale", KEYS, [])
