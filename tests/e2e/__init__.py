"""Whole runs: the demo, crash safety in real processes, the local cluster, the wheel, time zones and names end to end."""
