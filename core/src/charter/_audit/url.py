"""Connection URLs of network stores, as they may be shown: without their password."""

from __future__ import annotations

__all__ = ["display_location"]


def display_location(url: str) -> str:
    """`url` without the password of its user part or of a ``password=`` query parameter;
    text that is not a URL with a scheme comes back unchanged."""
    if "://" not in url:
        return url
    import urllib.parse  # here: it imports ipaddress, and most locations are file stores

    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, _, host = netloc.rpartition("@")
        user = credentials.partition(":")[0]
        netloc = f"{user}@{host}" if user else host
    query = "&".join(
        item
        for item in parts.query.split("&")
        if item and item.partition("=")[0].lower() != "password"
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
