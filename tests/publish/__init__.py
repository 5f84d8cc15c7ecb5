"""Tests of backfill_lib.publish."""
