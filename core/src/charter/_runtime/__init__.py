"""The runtime layer: the governor, the runner, approvals, settings and the audit writer."""
