"""The audit layer: the hash chain, the stores and chain verification."""
