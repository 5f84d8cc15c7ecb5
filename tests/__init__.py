"""The tests, one folder per stage of backfill_lib (core, intake, plan, run, validate, publish, report, strategies) and e2e for whole runs."""
