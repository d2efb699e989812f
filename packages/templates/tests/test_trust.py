"""Output trust in templates: a default per tool and levels per output path, by tool family."""

from __future__ import annotations

from pathlib import Path

import pytest
from charter_templates import TemplateError, load_templates, resolve


@pytest.mark.parametrize(
    "name, kind, verb, trust, internal, external",
    [
        ("read_inbox", "step.message", "GET", "external", "emails[*].sender", None),
        ("search_emails", "step.message", "GET", "external", "[*].from", "emails[*].reply_to"),
        ("get_channel_messages", "step.message", "GET", "external", "messages[*].user", None),
        ("list_calendar_events", "step.resource", "GET", "external", "events[*].attendees", None),
        ("get_transactions", "step.resource", "GET", "internal", None, "[*].reference"),
        ("list_payees", "step.resource", "GET", "internal", None, None),
        ("get_bill", "step.resource", "GET", "external", None, None),
        ("lookup_employee", "step.resource", "GET", "internal", None, None),
        ("read_file", "step.resource", "GET", None, "shared_with", None),
        ("fetch_webpage", "step.resource", "GET", "external", None, None),
        ("send_email", "step.message", "POST", "internal", None, None),
    ],
)
def test_tool_families(
    name: str,
    kind: str,
    verb: str,
    trust: str | None,
    internal: str | None,
    external: str | None,
) -> None:
    got = resolve("langchain", name, {})
    assert (got.kind, got.verb) == (kind, verb)
    data = got.properties.get("data", {})
    assert data.get("trust") == trust
    fields = data.get("field_trust", {})
    if internal is not None:
        assert fields[internal] == "internal"
    if external is not None:
        assert fields[external] == "external"


def test_payments_are_still_payments() -> None:
    got = resolve("generic", "send_money", {"iban": "DE89370400440532013000"})
    assert (got.kind, got.verb) == ("step.resource", "POST")


def test_an_override_replaces_levels_path_by_path(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "integration: generic\n"
        "rules:\n"
        "  - name: chat_read\n"
        "    words: [channel]\n"
        "    kind: step.message\n"
        "    verb: from_name\n"
        "    only_verbs: [GET]\n"
        "    set: {data.trust: internal}\n"
        "    field_trust: {'messages[*].text': internal}\n",
        encoding="utf-8",
    )
    mine = load_templates(str(path))
    got = resolve("generic", "read_channel", {}, overrides=mine)
    assert got.properties["data"] == {
        "trust": "internal",
        "field_trust": {"messages[*].text": "internal"},
    }


@pytest.mark.parametrize(
    "body, where, words",
    [
        ("field_trust: {'a[': internal}", "field_trust.a[", "is not an output path"),
        ("field_trust: {a: secret}", "field_trust.a", "is not a trust level"),
        ("field_trust: [a]", "field_trust", "mapping"),
    ],
)
def test_bad_field_trust_is_refused(tmp_path: Path, body: str, where: str, words: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(f"integration: generic\n{body}\n", encoding="utf-8")
    with pytest.raises(TemplateError) as err:
        load_templates(str(path))
    assert err.value.where == where
    assert words in str(err.value)
