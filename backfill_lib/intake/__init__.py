"""Intake: the request model and its rules (pure), and the checks of a request against live tables."""
