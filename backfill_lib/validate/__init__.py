"""Validate: GX suites, metrics and reconciliation, the diff by key, gates, and the Validate stage."""
