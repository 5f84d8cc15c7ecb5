"""Strategies: how each one stages a batch of partitions and how it publishes them.

Every strategy stages into the run's own staging table first; publishing is always exactly one commit on the
target, scoped by the plan (a partition predicate, the whole table for a rebuild, or a MERGE condition that
carries the range as a literal). No strategy overwrites without a predicate.
"""

from __future__ import annotations

from backfill_lib.intake.request import PublishMode, Strategy
from backfill_lib.strategies.base import StrategyImpl
from backfill_lib.strategies.changes_only import RecomputeChangesOnly
from backfill_lib.strategies.patch import Patch
from backfill_lib.strategies.rebuild import Rebuild
from backfill_lib.strategies.recompute import Recompute

_BY_NAME: dict[Strategy, StrategyImpl] = {Strategy.RECOMPUTE: Recompute(), Strategy.REBUILD: Rebuild(), Strategy.PATCH: Patch()}
#: Publish modes other than ``replace`` (the request allows them for recompute only).
_BY_MODE: dict[tuple[Strategy, PublishMode], StrategyImpl] = {
    (Strategy.RECOMPUTE, PublishMode.CHANGES_ONLY): RecomputeChangesOnly(),
}


def strategy_for(strategy: Strategy, publish_mode: PublishMode = PublishMode.REPLACE) -> StrategyImpl:
    """The implementation of ``strategy`` published in ``publish_mode`` (the request's ``publish_mode``).

    Staging, gates and audits are the same in every publish mode; only describing, publishing, the
    post-publish check and the Change Data Feed figure differ."""
    return _BY_MODE.get((strategy, publish_mode)) or _BY_NAME[strategy]
