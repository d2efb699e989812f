"""Values inside free text: URLs and their hosts, e-mail addresses, IBANs and phone numbers.

A message body the agent sends can carry a link, an address or an account number that came
from content nobody trusted. These extractors find such values in text and normalise them the
way provenance compares them, so a value extracted from an outgoing body and the same value
extracted from a user's message meet under the same key.

Every extractor runs in linear time: candidates are found with RE2 (never Python's `re`, which
backtracks) and checked with plain string methods. Text is read after NFKC (full-width
digits and letters count as their ASCII forms), and a lone surrogate is read as U+FFFD.

Normalised forms:

- host: lower case, no trailing dot, userinfo, port, path or brackets; a name with
  non-ASCII letters is written in IDNA (UTS 46, non-transitional: ``bücher.example`` is
  ``xn--bcher-kva.example``, ``faß.de`` stays apart from ``fass.de``); a backslash ends the
  host as it does in a browser;
- url: the scheme and normalised host, then the rest as written (``HTTPS://Docs.Example/a``
  is ``https://docs.example/a``); trailing sentence punctuation is not part of a URL;
- email: case-folded ``local@host`` with the host normalised;
- iban: upper case without spaces, and only when its ISO 13616 check digits are right;
- phone: ``+`` and the digits for a number written with ``+`` or ``00`` (international),
  the digits alone for one written with a leading ``0`` or ``(`` (national; a national and an
  international spelling of one number are different values); 7 to 15 digits.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Iterator

from charter._policy.regex import compile_re2, re2_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "KINDS",
    "extract",
    "iban_checksum_ok",
    "json_number_key",
    "nfkc",
    "norm_email",
    "norm_host",
    "norm_iban",
    "norm_phone",
    "norm_url",
    "number_key",
    "scan",
]

KINDS = ("urls", "hosts", "emails", "ibans", "phones")

# The longest text scanned. A trusted text past the cut loses only what is past it (those
# values are then not trusted, which fails closed); a judged text longer than this cannot be
# checked at all, and the rule that reads it says so (see `value_provenance`).
MAX_SCAN = 1_000_000

_EMAIL = r"[^\s@<>()\[\]{},;:\"'`/\\]+@[^\s@<>()\[\]{},;:\"'`/\\]+\.[^\s@<>()\[\]{},;:\"'`/\\]+"
_URL = r"(?i)(?:\b[a-z][a-z0-9+.\-]*://|\bwww\.)[^\s<>\"'`]+"
_IBAN = r"\b[A-Za-z]{2}[0-9]{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,3})?\b"
_PHONE = r"(?:\+|\(|\b0)[0-9][0-9 ()./\-]{4,24}[0-9]"
_TRAILING = ".,;:!?'\")]}>"
_EDGE = "\"'`()[]{}<>,;:!?.*"
_HOST_END = "/?#\\ "
_MAX_HOST = 253


@functools.cache
def _rx(pattern: str) -> Any:
    return compile_re2(pattern)


def nfkc(s: str) -> str:
    """`s` in Unicode NFKC (ASCII is already: skipped, it is the common case)."""
    return s if s.isascii() else unicodedata.normalize("NFKC", s)


def _idna(host: str) -> str:
    if host.isascii() or len(host) > _MAX_HOST:
        return host
    try:
        import idna  # deferred: most processes never meet a non-ASCII host

        return str(idna.encode(host, uts46=True, transitional=False).decode("ascii"))
    except (idna.IDNAError, UnicodeError, ValueError):
        # Not a valid IDNA name: kept as written (NFKC, case-folded), so it matches only
        # itself.
        return host


def norm_host(s: str) -> str:
    """The host of a URL, ``user@host`` or bare host name (see the module docstring)."""
    # lower(), not casefold(): IDNA maps case itself, and casefold() would turn ß into ss.
    h = " ".join(nfkc(s).split()).lower()
    if "://" in h:
        h = h.split("://", 1)[1]
    elif h.startswith("//"):
        h = h[2:]
    cut = min((i for i in map(h.find, _HOST_END) if i >= 0), default=-1)
    if cut >= 0:
        h = h[:cut]
    h = h.rsplit("@", 1)[-1]
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end > 0 else h[1:]
    h = h.split(":", 1)[0].rstrip(".")
    return _idna(h)


def norm_url(s: str) -> str:
    """A URL with its scheme and host normalised, the rest as written (sentence punctuation
    at its end removed)."""
    u = _strip_url(nfkc(s).strip())
    scheme, sep, rest = u.partition("://")
    if not sep:
        scheme, rest = "http", u  # www.example.org/...
    cut = min((i for i in map(rest.find, _HOST_END) if i >= 0), default=len(rest))
    return f"{scheme.lower()}://{norm_host(rest[:cut])}{rest[cut:]}"


def norm_email(s: str) -> str:
    """``local@host``, case-folded, with the host normalised."""
    local, _, host = " ".join(nfkc(s).split()).strip(_EDGE).rpartition("@")
    return f"{local.casefold()}@{norm_host(host)}"


def norm_iban(s: str) -> str:
    """NFKC, all whitespace removed, upper-cased."""
    return "".join(nfkc(s).split()).upper()


def norm_phone(s: str) -> str:
    """``+`` and the digits of an international number, the digits of a national one."""
    t = nfkc(s).strip()
    digits = "".join(c for c in t if c.isascii() and c.isdigit())
    if t.startswith("+"):
        return "+" + digits
    if digits.startswith("00"):
        return "+" + digits[2:]
    return digits


def iban_checksum_ok(compact: str) -> bool:
    """ISO 13616: the first four characters moved to the end, letters as numbers, mod 97 is 1."""
    if not (15 <= len(compact) <= 34 and compact.isascii() and compact.isalnum()):
        return False
    if not (compact[:2].isalpha() and compact[2:4].isdigit()):
        return False
    moved = compact[4:] + compact[:4]
    try:
        return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1
    except ValueError:
        return False


def _strip_url(u: str) -> str:
    while u and u[-1] in _TRAILING:
        # A closing bracket the URL opened itself is part of it (Wikipedia links).
        if u[-1] == ")" and u.count("(") >= u.count(")"):
            break
        u = u[:-1]
    return u


def _is_domain(host: str) -> bool:
    labels = host.split(".")
    if len(labels) < 2 or not all(labels) or len(host) > _MAX_HOST:
        return False
    return all(label.replace("-", "").isalnum() for label in labels)


def _text(text: str) -> str:
    return re2_text(nfkc(text[:MAX_SCAN]))


def urls(text: str) -> Iterator[str]:
    """Every URL (with a scheme, or starting ``www.``) in `text`, normalised."""
    for m in _rx(_URL).finditer(_text(text)):
        raw = _strip_url(m.group(0))
        if "://" in raw and not raw.split("://", 1)[1]:
            continue
        yield norm_url(raw)


def hosts(text: str) -> Iterator[str]:
    """The host of every URL and every e-mail address in `text`, normalised."""
    for u in urls(text):
        host = norm_host(u)
        if host:
            yield host
    for e in emails(text):
        yield e.rpartition("@")[2]


def emails(text: str) -> Iterator[str]:
    """Every e-mail address in `text`, normalised."""
    for m in _rx(_EMAIL).finditer(_text(text)):
        found = m.group(0).strip(_EDGE)
        local, _, host = found.rpartition("@")
        if local and _is_domain(host.rstrip(".")):
            yield norm_email(found)


def ibans(text: str) -> Iterator[str]:
    """Every IBAN in `text` (compact or in groups of four) whose check digits are right."""
    for m in _rx(_IBAN).finditer(_ascii_words(_text(text))):
        found = _valid_iban(m.group(0))
        if found:
            yield found


def _valid_iban(written: str) -> str | None:
    # An IBAN written in one piece ends there: a short word after it is another word.
    first = written.split(" ", 1)[0]
    if len(first) >= 15 and iban_checksum_ok(first.upper()):
        return first.upper()
    # A spaced IBAN followed by a short word is matched too long: the longest prefix with
    # valid check digits is the IBAN that was meant.
    compact = norm_iban(written)
    for end in range(len(compact), 14, -1):
        if iban_checksum_ok(compact[:end]):
            return compact[:end]
    return None


def scan(text: str) -> dict[str, list[str]]:
    """Every kind of `KINDS` at once (as `extract` finds them), scanning `text` once per
    pattern: what the provenance index runs on each trusted string."""
    scanned = _text(text)
    found_urls = []
    for m in _rx(_URL).finditer(scanned):
        raw = _strip_url(m.group(0))
        if "://" not in raw or raw.split("://", 1)[1]:
            found_urls.append(norm_url(raw))
    found_emails = []
    for m in _rx(_EMAIL).finditer(scanned):
        e = m.group(0).strip(_EDGE)
        local, _, host = e.rpartition("@")
        if local and _is_domain(host.rstrip(".")):
            found_emails.append(norm_email(e))
    found_ibans = []
    taken = []
    for m in _rx(_IBAN).finditer(_ascii_words(scanned)):
        taken.append((m.start(), m.end()))
        iban = _valid_iban(m.group(0))
        if iban:
            found_ibans.append(iban)
    found_hosts = [h for h in map(norm_host, found_urls) if h]
    found_hosts += [e.rpartition("@")[2] for e in found_emails]
    return {
        "urls": found_urls,
        "hosts": found_hosts,
        "emails": found_emails,
        "ibans": found_ibans,
        "phones": list(_phones(scanned, taken)),
    }


_CURRENCY = "$€£¥₹"


def number_key(token: str) -> str | None:
    """The canonical form of a number written in text (``40``, ``40.0``, ``-3.5``, ``1,000``,
    ``€40.00``), or None when `token` is not one: integral values without a fraction, others
    without trailing zeros, so ``40``, ``40.0`` and ``40.00`` share ``40``. Exponents and
    commas other than thousands separators (``1,5``) are not read as numbers."""
    t = token.strip(_CURRENCY)
    if not t or len(t) > 40:
        return None
    sign = ""
    if t[0] in "+-":
        sign, t = ("-" if t[0] == "-" else ""), t[1:]
    whole, dot, frac = t.partition(".")
    if "," in whole:
        groups = whole.split(",")
        if not (1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])):
            return None
        whole = "".join(groups)
    if not (whole.isascii() and whole.isdigit()) or (
        dot and not (frac.isascii() and frac.isdigit())
    ):
        return None
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    if whole == "0" and not frac:
        return "0"
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def json_number_key(value: int | float) -> str | None:
    """`number_key` for a JSON number: 40, 40.0 and 4e1 share ``40``. None for an integer
    too long to be a quantity anyone wrote (it then matches nothing)."""
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 128 else None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    if value == int(value) and abs(value) < 2**128:
        return str(int(value))
    from decimal import Decimal

    text = format(Decimal(repr(value)), "f")
    return number_key(text)


def phones(text: str) -> Iterator[str]:
    """Every phone number in `text`: 7 to 15 digits, written with a leading ``+``, ``00``,
    ``0`` or ``(``; normalised. Digits inside an IBAN are not a phone number."""
    scanned = _text(text)
    taken = [(m.start(), m.end()) for m in _rx(_IBAN).finditer(_ascii_words(scanned))]
    yield from _phones(scanned, taken)


def _phones(scanned: str, taken: list[tuple[int, int]]) -> Iterator[str]:
    for m in _rx(_PHONE).finditer(scanned):
        start, end = m.start(), m.end()
        if any(a < end and start < b for a, b in taken):
            continue
        raw = m.group(0)
        if raw.count("(") != raw.count(")"):
            raw = raw.lstrip("(")
        n = norm_phone(raw)
        if 7 <= len(n.lstrip("+")) <= 15:
            yield n


def _ascii_words(s: str) -> str:
    # RE2's `\b` knows only ASCII word characters; standing `_` in for every other one gives
    # `\b` its Unicode meaning (an IBAN glued to a non-ASCII letter is not an IBAN).
    if s.isascii():
        return s
    return "".join("_" if not c.isascii() and (c.isalnum() or c == "_") else c for c in s)


_EXTRACTORS = {"urls": urls, "hosts": hosts, "emails": emails, "ibans": ibans, "phones": phones}


def extract(text: str, kinds: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(kind, normalised value)`` for every value of `kinds` (see `KINDS`) found in `text`,
    in kind order, then text order; duplicates are kept."""
    for kind in kinds:
        for value in _EXTRACTORS[kind](text):
            yield kind, value
