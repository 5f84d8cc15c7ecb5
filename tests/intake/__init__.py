"""Tests of backfill_lib.intake."""
