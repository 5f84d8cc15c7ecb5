"""The pure core: errors, partitions and partition keys, value types, settings, retry, faults, progress.

Nothing here imports pyspark, delta or great_expectations, nor any stage of backfill_lib."""
