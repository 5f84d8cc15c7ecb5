"""Whole runs: the demo, crash safety in real processes, the local cluster, the wheel, the Python API, time zones
and column names end to end."""
