"""The local decision server (``charter serve``): its files, protocol, service and listeners."""
