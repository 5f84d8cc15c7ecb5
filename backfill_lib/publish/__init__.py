"""Publish: the commit and its fence, release readiness and history, marts, monitor and rollback."""
