"""Values inside text: the extractors find what is embedded, normalise it once, never raise."""

from __future__ import annotations

import string

import pytest
from charter._policy.extract import (
    KINDS,
    emails,
    extract,
    hosts,
    iban_checksum_ok,
    ibans,
    norm_email,
    norm_host,
    norm_iban,
    norm_phone,
    norm_url,
    phones,
    scan,
    urls,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

label = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12)
domain = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(label, min_size=1, max_size=3),
    st.text(string.ascii_lowercase, min_size=2, max_size=6),
)
local = st.text(string.ascii_lowercase + string.digits + "._+-", min_size=1, max_size=16).filter(
    lambda s: s.strip(".") == s
)
filler = st.text(string.ascii_letters + " ,;", max_size=40).map(lambda s: f" {s} ")


def _iban(country: str, bban: str) -> str:
    """A valid IBAN for `country` and `bban`: the check digits computed (ISO 13616)."""
    digits = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(digits) % 97:02d}{bban}"


iban = st.builds(
    _iban,
    st.text(string.ascii_uppercase, min_size=2, max_size=2),
    st.text(string.ascii_uppercase + string.digits, min_size=11, max_size=30),
)


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_is_scanned_without_error_and_values_are_normal(text: str) -> None:
    found = scan(text)
    assert set(found) == set(KINDS)
    for url in found["urls"]:
        assert norm_url(url) == url
    for host in found["hosts"]:
        assert norm_host(host) == host
    for email in found["emails"]:
        assert norm_email(email) == email
    for value in found["ibans"]:
        assert iban_checksum_ok(value) and norm_iban(value) == value
    for phone in found["phones"]:
        assert norm_phone(phone) == phone and 7 <= len(phone.lstrip("+")) <= 15
    assert [v for _, v in extract(text, ["urls"])] == found["urls"]


@SETTINGS
@given(filler, local, domain, filler)
def test_an_embedded_address_is_found(before: str, name: str, host: str, after: str) -> None:
    address = f"{name}@{host}"
    text = f"{before}{address.upper()}{after}"
    assert address in list(emails(text))
    assert host in list(hosts(text))


@SETTINGS
@given(filler, st.sampled_from(["https", "http", "ftp"]), domain, label, filler)
def test_an_embedded_link_and_its_host_are_found(
    before: str, scheme: str, host: str, path: str, after: str
) -> None:
    text = f"{before}{scheme}://{host.upper()}/{path}.{after}"
    assert f"{scheme}://{host}/{path}" in list(urls(text))
    assert host in list(hosts(text))


@SETTINGS
@given(filler, iban, st.booleans(), filler)
def test_an_embedded_iban_is_found_spaced_or_not(
    before: str, value: str, spaced: bool, after: str
) -> None:
    written = " ".join(value[i : i + 4] for i in range(0, len(value), 4)) if spaced else value
    # A spaced IBAN's last group is 1 to 4 characters, so a short word right after one is
    # ambiguous (the check digits decide); text puts punctuation there.
    assert value in list(ibans(f"{before}{written}.{after}"))
    if not spaced:
        assert value in list(ibans(f"{before}{written}{after}"))


@SETTINGS
@given(iban, st.integers(min_value=1, max_value=9))
def test_a_wrong_check_digit_is_not_an_iban(value: str, delta: int) -> None:
    wrong = value[:3] + str((int(value[3]) + delta) % 10) + value[4:]
    assert not iban_checksum_ok(wrong)
    assert wrong not in list(ibans(f"pay {wrong} now"))


@SETTINGS
@given(
    filler,
    st.integers(min_value=1, max_value=99),
    st.lists(st.text(string.digits, min_size=2, max_size=4), min_size=3, max_size=4),
    st.sampled_from([" ", "-", "."]),
    filler,
)
def test_an_international_phone_number_is_found(
    before: str, country: int, groups: list[str], sep: str, after: str
) -> None:
    digits = f"{country}{''.join(groups)}"
    if not 7 <= len(digits) <= 15:
        return
    text = f"{before}+{country} {sep.join(groups)}{after}"
    assert f"+{digits}" in list(phones(text))
    assert f"+{digits}" in list(phones(text.replace("+", "00", 1)))


@pytest.mark.parametrize(
    "text",
    [
        "on 2025-01-06 at 10:30",
        "invoice 12345678, amount 1.000.000",
        "DE89 3704 0044 0532 0130 00",
    ],
)
def test_dates_amounts_and_ibans_are_not_phone_numbers(text: str) -> None:
    assert list(phones(text)) == []


@pytest.mark.parametrize(
    "token", ["a" * 100_000, "+0" * 50_000, "http://" * 20_000, "DE89" * 25_000]
)
def test_a_long_token_keeps_the_values_around_it(token: str) -> None:
    text = f"mail bob@example.com via https://host.example/x then {token} +49 30 1234567"
    found = scan(text)
    assert "bob@example.com" in found["emails"]
    assert "host.example" in found["hosts"]
    assert "+49301234567" in found["phones"]


def test_value_provenance_offers_exactly_the_kinds_extract_finds() -> None:
    from charter import get_rule
    from charter._policy.extract import KINDS

    fields = get_rule("value_provenance").params_schema["properties"]["fields"]
    assert fields["items"]["properties"]["extract"]["items"]["enum"] == list(KINDS)
