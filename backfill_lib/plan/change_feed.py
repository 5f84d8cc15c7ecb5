"""What a publishing commit records in the target's Change Data Feed, said before it is made. Pure.

With ``delta.enableChangeDataFeed = true`` every commit also records its changed rows, read with
``table_changes`` / ``readChangeFeed`` by whoever consumes the table downstream. A ``replaceWhere`` commit
removes whole partitions' files and adds new ones, so the feed holds a ``delete`` for every target row in range
and an ``insert`` for every row written, changed or not; a MERGE records only the rows it changes (an
``update_preimage`` and an ``update_postimage`` per updated row, an ``insert`` per inserted row, a ``delete`` per
deleted row).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChangeRows:
    """The change rows one publishing commit emits, by change type; ``None`` where not known yet.

    ``merge`` is False for a ``replaceWhere`` commit (``deletes``: the target's rows in range, from the plan's
    per-partition ``numRecords`` in the Delta log; ``inserts``: the staged rows) and True for a MERGE of the rows
    that differ (``updates`` rows each give an ``update_preimage`` and an ``update_postimage``; counts from the
    diff of the staged rows against the target by key).
    """

    merge: bool
    deletes: int | None
    inserts: int | None
    updates: int | None = 0

    @property
    def total(self) -> int | None:
        """All change rows (an update counts twice: pre- and post-image), or ``None`` when a side is unknown."""
        if self.deletes is None or self.inserts is None or self.updates is None:
            return None
        return self.deletes + self.inserts + 2 * self.updates

    def describe(self) -> str:
        """One line for the dry run, the console and the report."""
        if self.merge:
            if self.total is None:
                return ("only the rows that differ: an update_preimage and an update_postimage per changed row, an "
                        "insert per new key, a delete per key no longer staged (known after staging, from the diff)")
            return (f"{self.total:,} change rows, only the rows that differ: {self.updates:,} update_preimage + "
                    f"{self.updates:,} update_postimage + {self.inserts:,} insert + {self.deletes:,} delete "
                    "(from the diff)")
        deletes = ("an unknown number of delete rows (a file in range has no statistics)" if self.deletes is None
                   else f"{self.deletes:,} delete")
        whole = "every row of every partition in range, changed or not; publish_mode: changes_only emits only the rows that differ"
        if self.total is None:
            inserts = "insert" if self.inserts is None else f"{self.inserts:,} insert"
            known = " (one per staged row, known after staging)" if self.inserts is None else " (the staged rows)"
            return (f"{deletes} (the target's rows in range, from the Delta log) + {inserts}{known}: {whole}")
        return (f"{self.total:,} change rows: {self.deletes:,} delete (the target's rows in range, from the Delta "
                f"log) + {self.inserts:,} insert (the staged rows): {whole}")


def describe_change_feed(enabled: bool | None, rows: ChangeRows | None, publishing: str) -> str:
    """The dry run's and report's line on the target's Change Data Feed: ``enabled`` is the plan's flag,
    ``rows`` the strategy's :class:`ChangeRows` (``None``: not estimated for it), ``publishing`` names the commit."""
    if not enabled:
        return "off (delta.enableChangeDataFeed is not true on the target): publishing records no change rows"
    if rows is None:
        return f"on (delta.enableChangeDataFeed): {publishing} records its changes; their number is not estimated"
    return f"on (delta.enableChangeDataFeed): {publishing} emits {rows.describe()}"
