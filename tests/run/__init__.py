"""Tests of backfill_lib.run."""
