"""Tests of backfill_lib.validate."""
