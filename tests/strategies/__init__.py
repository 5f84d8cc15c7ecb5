"""Tests of backfill_lib.strategies."""
