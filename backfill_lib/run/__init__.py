"""Run: the staging table, the batch stager and the ledger that records every step."""
