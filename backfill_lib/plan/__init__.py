"""Plan: the frozen plan and its builder (pure), the dry-run explainer (pure), and prepare (reads state)."""
