"""The engine layer: the policy engine and its decisions."""
