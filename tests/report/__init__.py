"""Tests of backfill_lib.report."""
