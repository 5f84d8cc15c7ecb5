"""The outcome of a check: one value type every stage records and the report reads (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """The outcome of one check on one partition (or on a batch when ``partition`` is ``None``)."""

    kind: str
    name: str
    success: bool
    partition: str | None = None
    batch: int | None = None
    observed: str | None = None
    expected: str | None = None
    message: str | None = None

    def describe(self) -> str:
        where = (f"partition {self.partition}" if self.partition else
                 f"batch {self.batch}" if self.batch is not None else "the range")
        detail = self.message or f"observed {self.observed}, expected {self.expected}"
        return f"{self.kind} {self.name} failed on {where}: {detail}"
