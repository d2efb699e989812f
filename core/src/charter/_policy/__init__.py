"""The policy layer: policies, manifests, params, selectors and the rule registry."""
