"""Strategies: how each one stages a batch of partitions and how it publishes them.

Every strategy stages into the run's own staging table first; publishing is always exactly one commit on the
target, scoped by the plan (a partition predicate, the whole table for a rebuild, or a MERGE condition that
carries the range as a literal). No strategy overwrites without a predicate.
"""

from __future__ import annotations

from backfill_lib.request import Strategy
from backfill_lib.strategies.base import StrategyImpl
from backfill_lib.strategies.patch import Patch
from backfill_lib.strategies.rebuild import Rebuild
from backfill_lib.strategies.recompute import Recompute

_BY_NAME: dict[Strategy, StrategyImpl] = {Strategy.RECOMPUTE: Recompute(), Strategy.REBUILD: Rebuild(), Strategy.PATCH: Patch()}


def strategy_for(strategy: Strategy) -> StrategyImpl:
    """The implementation of ``strategy``."""
    return _BY_NAME[strategy]
