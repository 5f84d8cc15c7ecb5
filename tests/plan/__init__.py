"""Tests of backfill_lib.plan."""
