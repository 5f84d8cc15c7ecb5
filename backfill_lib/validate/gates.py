"""Row-count gates: staged rows per partition against the target's current rows (from the Delta log). Pure."""

from __future__ import annotations

from backfill_lib.core.checks import Check
from backfill_lib.core.partitions import key_order
from backfill_lib.intake.request import Gates


def row_count_checks(current: dict[str, int | None], staged: dict[str, int], gates: Gates) -> list[Check]:
    """One check per partition either side has.

    A partition fails when it loses more than ``gates.max_row_loss_fraction`` of its rows (an emptied
    partition loses all) and row loss is not allowed, or grows more than ``gates.max_row_growth_fraction`` and
    growth is not allowed. Unknown current counts (files without statistics) pass, named in ``observed``.
    """
    checks = []
    for key in sorted(set(current) | set(staged), key=key_order):
        before, after = current.get(key) or 0, staged.get(key, 0)
        if current.get(key) is None and key in current:
            checks.append(Check("gate", "row_count", True, key, None, f"? -> {after} rows", "current rows unknown"))
            continue
        message = None
        if before and after < before:
            loss = (before - after) / before
            if loss > gates.max_row_loss_fraction and not gates.allow_row_loss:
                what = "emptied" if after == 0 else f"loses {loss:.0%} of its rows"
                message = (f"partition {key} {what} ({before} -> {after} rows), more than the "
                           f"{gates.max_row_loss_fraction:.0%} allowed (set gates.allow_row_loss to publish anyway)")
        elif gates.max_row_growth_fraction is not None and after > before and not gates.allow_row_growth:
            growth = (after - before) / before if before else float("inf")
            if growth > gates.max_row_growth_fraction:
                message = (f"partition {key} grows {before} -> {after} rows, more than the "
                           f"{gates.max_row_growth_fraction:.0%} allowed (set gates.allow_row_growth to publish anyway)")
        checks.append(Check("gate", "row_count", message is None, key, None, f"{before} -> {after} rows",
                            f"loss at most {gates.max_row_loss_fraction:.0%}", message))
    return checks
