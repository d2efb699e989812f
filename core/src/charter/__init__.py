"""Charter: run-time governance for AI agents."""
