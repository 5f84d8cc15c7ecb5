"""Spark and Delta access: the session, the Delta log and table-state readers, the scheduler pool."""
