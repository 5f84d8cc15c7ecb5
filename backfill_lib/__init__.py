"""delta-backfill: safe, resumable, validated backfills of Delta Lake tables on Spark."""

__version__ = "0.1.0"
