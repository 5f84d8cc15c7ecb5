"""The report: rendering (pure) and the run report built from the ledger."""
