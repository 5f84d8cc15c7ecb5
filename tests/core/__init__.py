"""Tests of backfill_lib.core."""
