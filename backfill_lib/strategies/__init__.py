"""Strategies: how each one stages a batch of partitions and how it publishes them.

Every strategy stages into the run's own staging table first; publishing is always exactly one commit on the
target, scoped by the plan (a partition predicate, the whole table for a rebuild, or a MERGE condition that
carries the range as a literal). No strategy overwrites without a predicate.

:mod:`backfill_lib.plan.kinds` holds what the plan needs of a strategy (traits, dry-run text) and is pure;
the implementations need Spark, so :func:`strategy_for` imports them when first asked (importing this package,
or its ``kinds``, imports no pyspark).
"""

from __future__ import annotations

from functools import cache

from backfill_lib.intake.request import PublishMode, Strategy
from backfill_lib.plan.kinds import StrategyKind, kind_for

__all__ = ["StrategyKind", "implementation", "kind_for", "strategy_for"]


@cache
def _implementations() -> dict:
    from backfill_lib.strategies.changes_only import RecomputeChangesOnly
    from backfill_lib.strategies.patch import Patch
    from backfill_lib.strategies.rebuild import Rebuild
    from backfill_lib.strategies.recompute import Recompute

    return {
        (Strategy.RECOMPUTE, PublishMode.REPLACE): Recompute(),
        (Strategy.REBUILD, PublishMode.REPLACE): Rebuild(),
        (Strategy.PATCH, PublishMode.REPLACE): Patch(),
        # Publish modes other than ``replace`` (the request allows them for recompute only).
        (Strategy.RECOMPUTE, PublishMode.CHANGES_ONLY): RecomputeChangesOnly(),
    }


def strategy_for(strategy: Strategy, publish_mode: PublishMode = PublishMode.REPLACE):
    """The implementation (a :class:`~backfill_lib.strategies.base.StrategyImpl`) of ``strategy`` published in
    ``publish_mode`` (the request's ``publish_mode``).

    Staging, gates and audits are the same in every publish mode; only describing, publishing, the
    post-publish check and the Change Data Feed figure differ."""
    found = _implementations()
    return found.get((strategy, publish_mode)) or found[(strategy, PublishMode.REPLACE)]


def implementation(plan):
    """The implementation of ``plan``'s strategy in its request's publish mode: what the runner hands the stages
    (:data:`backfill_lib.plan.model.Implementation`)."""
    return strategy_for(plan.strategy, plan.request.publish_mode)
