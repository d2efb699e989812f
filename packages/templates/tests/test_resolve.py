"""Contract tests for charter_templates: the mapping table, properties, overrides and errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import charter_templates
import pytest
from charter_templates import (
    EFFECT_CLASSES,
    Resolution,
    TemplateError,
    TemplateSet,
    load_templates,
    resolve,
)
from charter_templates._model import KINDS, VALID_VERBS, is_valid_pair
from charter_templates._words import split_words
from hypothesis import given, settings
from hypothesis import strategies as st

CC = "claude_code"

# (integration, tool name, kind, verb, effect)
TABLE: list[tuple[str, str, str, str | None, str]] = [
    # Claude Code built-ins
    (CC, "Bash", "step.exec", None, "non_idempotent"),
    (CC, "Read", "step.resource", "GET", "read_only"),
    (CC, "Write", "step.resource", "POST", "non_idempotent"),
    (CC, "Edit", "step.resource", "PATCH", "idempotent"),
    (CC, "MultiEdit", "step.resource", "PATCH", "idempotent"),
    (CC, "NotebookEdit", "step.resource", "PATCH", "idempotent"),
    (CC, "Glob", "step.resource", "GET", "read_only"),
    (CC, "Grep", "step.resource", "GET", "read_only"),
    (CC, "LS", "step.resource", "GET", "read_only"),
    (CC, "WebFetch", "step.resource", "GET", "read_only"),
    (CC, "WebSearch", "step.resource", "GET", "read_only"),
    (CC, "Task", "step.self", "POST", "non_idempotent"),
    (CC, "TodoWrite", "step.self", "PATCH", "idempotent"),
    (CC, "BashOutput", "step.exec", None, "read_only"),
    (CC, "ExitPlanMode", "step.gate", None, "none"),
    # Claude Code MCP tools: generic rules on the tool part
    (CC, "mcp__github__create_issue", "step.resource", "POST", "non_idempotent"),
    (CC, "mcp__slack__send_message", "step.message", "POST", "non_idempotent"),
    (CC, "mcp__fs__read_file", "step.resource", "GET", "read_only"),
    (CC, "mcp__claude_ai_Gmail__search_emails", "step.message", "GET", "read_only"),
    # Unknown Claude tools fall back to the generic rules
    (CC, "delete_branch", "step.resource", "DELETE", "idempotent"),
    (CC, "Frobnicate", "step.unknown", None, "non_idempotent"),
    # LangChain community tools
    ("langchain", "tavily_search_results_json", "step.resource", "GET", "read_only"),
    ("langchain", "wikipedia", "step.resource", "GET", "read_only"),
    ("langchain", "duckduckgo_search", "step.resource", "GET", "read_only"),
    ("langchain", "python_repl", "step.exec", None, "non_idempotent"),
    ("langchain", "terminal", "step.exec", None, "non_idempotent"),
    ("langchain", "requests_get", "step.resource", "GET", "read_only"),
    ("langchain", "requests_post", "step.resource", "POST", "non_idempotent"),
    ("langchain", "sql_db_query", "step.resource", "GET", "read_only"),
    ("langchain", "gmail_send_message", "step.message", "POST", "non_idempotent"),
    ("langchain", "gmail_search", "step.message", "GET", "read_only"),
    ("langchain", "read_file", "step.resource", "GET", "read_only"),
    ("langchain", "write_file", "step.resource", "POST", "non_idempotent"),
    ("langchain", "copy_file", "step.resource", "POST", "non_idempotent"),
    ("langchain", "move_file", "step.resource", "PATCH", "idempotent"),
    ("langchain", "file_delete", "step.resource", "DELETE", "idempotent"),
    ("langchain", "list_directory", "step.resource", "GET", "read_only"),
    ("langchain", "human", "step.gate", None, "none"),
    # AgentDojo-like tools
    ("generic", "send_email", "step.message", "POST", "non_idempotent"),
    ("generic", "get_received_emails", "step.message", "GET", "read_only"),
    ("generic", "read_inbox", "step.message", "GET", "read_only"),
    ("generic", "search_emails", "step.message", "GET", "read_only"),
    ("generic", "get_messages", "step.message", "GET", "read_only"),
    ("generic", "read_email", "step.message", "GET", "read_only"),
    ("generic", "list_emails", "step.message", "GET", "read_only"),
    ("generic", "delete_email", "step.resource", "DELETE", "idempotent"),
    ("generic", "send_money", "step.resource", "POST", "non_idempotent"),
    ("generic", "schedule_transaction", "step.resource", "POST", "non_idempotent"),
    ("generic", "update_scheduled_transaction", "step.resource", "PATCH", "idempotent"),
    ("generic", "get_iban", "step.resource", "GET", "read_only"),
    ("generic", "update_password", "step.credential", "PATCH", "idempotent"),
    ("generic", "update_user_info", "step.resource", "PATCH", "idempotent"),
    ("generic", "get_balance", "step.resource", "GET", "read_only"),
    ("generic", "get_most_recent_transactions", "step.resource", "GET", "read_only"),
    ("generic", "create_calendar_event", "step.resource", "POST", "non_idempotent"),
    ("generic", "cancel_calendar_event", "step.resource", "DELETE", "idempotent"),
    ("generic", "reschedule_calendar_event", "step.resource", "PATCH", "idempotent"),
    ("generic", "add_calendar_event_participants", "step.resource", "POST", "non_idempotent"),
    ("generic", "get_day_calendar_events", "step.resource", "GET", "read_only"),
    ("generic", "search_files", "step.resource", "GET", "read_only"),
    ("generic", "share_file", "step.message", "POST", "non_idempotent"),
    ("generic", "append_to_file", "step.resource", "PATCH", "idempotent"),
    ("generic", "create_file", "step.resource", "POST", "non_idempotent"),
    ("generic", "delete_file", "step.resource", "DELETE", "idempotent"),
    ("generic", "get_file_by_id", "step.resource", "GET", "read_only"),
    ("generic", "send_direct_message", "step.message", "POST", "non_idempotent"),
    ("generic", "send_channel_message", "step.message", "POST", "non_idempotent"),
    ("generic", "read_channel_messages", "step.message", "GET", "read_only"),
    ("generic", "invite_user_to_slack", "step.message", "POST", "non_idempotent"),
    ("generic", "remove_user_from_slack", "step.resource", "DELETE", "idempotent"),
    ("generic", "get_webpage", "step.resource", "GET", "read_only"),
    ("generic", "post_webpage", "step.resource", "POST", "non_idempotent"),
    ("generic", "reserve_hotel", "step.resource", "POST", "non_idempotent"),
    ("generic", "get_rating_reviews_for_hotels", "step.resource", "GET", "read_only"),
    ("generic", "get_user_information", "step.resource", "GET", "read_only"),
    # Payments, credentials, exec, precedence between words
    ("mcp", "refund_payment", "step.resource", "POST", "non_idempotent"),
    ("mcp", "get_payment_history", "step.resource", "GET", "read_only"),
    ("mcp", "cancel_payment", "step.resource", "DELETE", "idempotent"),
    ("mcp", "wire_transfer", "step.resource", "POST", "non_idempotent"),
    ("mcp", "get_api_key", "step.credential", "GET", "read_only"),
    ("mcp", "createAccessToken", "step.credential", "POST", "non_idempotent"),
    ("mcp", "revoke-token", "step.credential", "DELETE", "idempotent"),
    ("mcp", "list_secrets", "step.credential", "GET", "read_only"),
    ("mcp", "send_api_key", "step.message", "POST", "non_idempotent"),
    ("mcp", "run_command", "step.exec", None, "non_idempotent"),
    ("mcp", "execute_shell", "step.exec", None, "non_idempotent"),
    ("mcp", "execute_payment", "step.resource", "POST", "non_idempotent"),
    ("mcp", "browser_press_key", "step.resource", "PATCH", "non_idempotent"),
    ("mcp", "notify_user", "step.message", "POST", "non_idempotent"),
    ("mcp", "create_issue_comment", "step.message", "POST", "non_idempotent"),
    ("mcp", "get_post", "step.resource", "GET", "read_only"),
    ("mcp", "get_or_create_user", "step.resource", "POST", "non_idempotent"),
    ("mcp", "read_and_delete_logs", "step.resource", "DELETE", "idempotent"),
    ("mcp", "getUserProfile", "step.resource", "GET", "read_only"),
    ("mcp", "files.list", "step.resource", "GET", "read_only"),
    # CrewAI tools (names are sentences or class names)
    ("crewai", "Search the internet", "step.resource", "GET", "read_only"),
    ("crewai", "Read a file's content", "step.resource", "GET", "read_only"),
    ("crewai", "ScrapeWebsiteTool", "step.resource", "GET", "read_only"),
    ("crewai", "Read website content", "step.resource", "GET", "read_only"),
    ("llamaindex", "load_data", "step.resource", "GET", "read_only"),
    # Unknown names never raise
    ("generic", "frobnicate", "step.unknown", None, "non_idempotent"),
    ("generic", "", "step.unknown", None, "non_idempotent"),
    ("langchain", "Calculator", "step.unknown", None, "non_idempotent"),
    ("some_new_framework", "___", "step.unknown", None, "non_idempotent"),
]


@pytest.mark.parametrize(("integration", "name", "kind", "verb", "effect"), TABLE)
def test_table(integration: str, name: str, kind: str, verb: str | None, effect: str) -> None:
    result = resolve(integration, name)
    assert (result.kind, result.verb, result.effect) == (kind, verb, effect)
    assert result.properties["tool"]["name"] == name
    assert result.properties["tool"]["effect"] == effect


def test_table_is_large_and_valid() -> None:
    assert len(TABLE) >= 60
    for _, _, kind, verb, effect in TABLE:
        assert is_valid_pair(kind, verb)
        assert effect in EFFECT_CLASSES


# --- Claude Code properties ---------------------------------------------------------------


def test_bash_command_and_description() -> None:
    args = {"command": "rm -rf build", "description": "Clean", "timeout": 5}
    kind, verb, props, effect = resolve(CC, "Bash", args)
    assert (kind, verb, effect) == ("step.exec", None, "non_idempotent")
    assert props == {
        "exec": {"command": "rm -rf build", "description": "Clean"},
        "tool": {"name": "Bash", "effect": "non_idempotent"},
    }


def test_read_write_edit_paths() -> None:
    for name in ("Read", "Write", "Edit", "MultiEdit"):
        props = resolve(CC, name, {"file_path": "src/app.py", "content": "x"}).properties
        assert props["target"] == {"path": "src/app.py"}
    notebook = resolve(CC, "NotebookEdit", {"notebook_path": "a.ipynb"}).properties
    assert notebook["target"] == {"path": "a.ipynb"}


def test_glob_grep_ls_paths() -> None:
    assert resolve(CC, "Glob", {"pattern": "**/*.py"}).properties["target"] == {
        "path": "**/*.py",
        "pattern": "**/*.py",
    }
    assert resolve(CC, "Glob", {"pattern": "*.md", "path": "docs"}).properties["target"] == {
        "path": "docs",
        "pattern": "*.md",
    }
    grep = resolve(CC, "Grep", {"pattern": "TODO", "path": "src"}).properties
    assert grep["target"] == {"path": "src", "pattern": "TODO"}
    assert resolve(CC, "LS", {"path": "logs"}).properties["target"] == {"path": "logs"}


def test_webfetch_url_host_and_trust() -> None:
    result = resolve(CC, "WebFetch", {"url": "https://User@Docs.Example.COM:8443/a?b=1"})
    assert result.properties["target"] == {
        "url": "https://User@Docs.Example.COM:8443/a?b=1",
        "host": "docs.example.com",
    }
    assert result.properties["data"] == {"trust": "external"}


def test_webfetch_without_url_still_external() -> None:
    props = resolve(CC, "WebFetch", {"prompt": "summarise"}).properties
    assert "target" not in props
    assert props["data"] == {"trust": "external"}


def test_websearch_query_and_trust() -> None:
    props = resolve(CC, "WebSearch", {"query": "charter agents"}).properties
    assert props["target"] == {"query": "charter agents"}
    assert props["data"] == {"trust": "external"}


def test_mcp_server_and_inner_properties() -> None:
    result = resolve(CC, "mcp__fs__read_file", {"path": "notes.txt"})
    assert result.properties["tool"] == {
        "name": "mcp__fs__read_file",
        "effect": "read_only",
        "server": "fs",
    }
    assert result.properties["target"] == {"path": "notes.txt"}
    slack = resolve(CC, "mcp__slack__send_message", {"channel": "#ops", "text": "hi"})
    assert slack.properties["message"] == {"to": "#ops"}
    assert slack.properties["tool"]["server"] == "slack"


def test_mcp_server_with_underscores() -> None:
    props = resolve(CC, "mcp__claude_ai_Gmail__send_email").properties
    assert props["tool"]["server"] == "claude_ai_Gmail"


def test_mcp_prefix_without_tool_is_not_a_pattern_match() -> None:
    assert resolve(CC, "mcp__server__").kind == "step.unknown"


def test_integration_names_are_normalised() -> None:
    assert resolve("Claude-Code", "Bash").kind == "step.exec"
    assert resolve(" CLAUDE_CODE ", "Task").kind == "step.self"


def test_generic_properties() -> None:
    props = resolve("langchain", "requests_get", {"url": "example.org/page"}).properties
    assert props["target"] == {"url": "example.org/page", "host": "example.org"}
    assert props["data"] == {"trust": "external"}
    repl = resolve("langchain", "python_repl", {"query": "print(1)"}).properties
    assert repl["exec"] == {"command": "print(1)"}
    shell = resolve("langchain", "terminal", {"commands": ["ls", "pwd"]}).properties
    assert shell["exec"] == {"command": ["ls", "pwd"]}
    mail = resolve("generic", "send_email", {"recipients": ["a@x.org"], "body": "b"}).properties
    assert mail["message"] == {"to": ["a@x.org"]}
    inbox = resolve("generic", "read_inbox").properties
    assert inbox["data"]["trust"] == "external"
    assert inbox["data"]["field_trust"]["emails[*].sender"] == "internal"


def test_host_of_edge_cases() -> None:
    def host(url: str) -> Any:
        return resolve(CC, "WebFetch", {"url": url}).properties["target"].get("host")

    assert host("HTTP://[::1]:80/x") == "::1"
    assert host("http://[broken") is None
    assert host("mailto:someone@example.org") is None
    assert host("example.com:8080/x") == "example.com"


# --- Resolution ---------------------------------------------------------------------------


def test_resolution_is_frozen_and_unpacks() -> None:
    result = resolve("generic", "get_balance")
    assert isinstance(result, Resolution)
    kind, verb, props, effect = result
    assert (kind, verb, props, effect) == (
        result.kind,
        result.verb,
        result.properties,
        result.effect,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.kind = "step.exec"  # type: ignore[misc]


def test_resolution_compares_hashes_prints_and_pickles_by_value() -> None:
    import copy
    import pickle

    result = Resolution("step.exec", None, {"tool": {"name": "Bash"}}, "non_idempotent")
    same = Resolution("step.exec", None, {"tool": {"name": "Bash"}}, "non_idempotent")
    assert result == same
    assert result != Resolution("step.exec", None, {}, "non_idempotent")
    assert repr(result) == (
        "Resolution(kind='step.exec', verb=None, properties={'tool': {'name': 'Bash'}}, "
        "effect='non_idempotent')"
    )
    assert pickle.loads(pickle.dumps(result)) == result
    assert copy.deepcopy(result) == result
    with pytest.raises(dataclasses.FrozenInstanceError):
        del result.verb
    frozen = Resolution("step.exec", None, (), "none")  # type: ignore[arg-type]
    assert hash(frozen) == hash(Resolution("step.exec", None, (), "none"))  # type: ignore[arg-type]


def test_parsed_templates_are_immutable_values() -> None:
    import pickle

    templates = load_templates()
    template = templates._template_for(CC)
    assert pickle.loads(pickle.dumps(template)) == template
    with pytest.raises(dataclasses.FrozenInstanceError):
        template.extends = None  # type: ignore[misc]


def test_each_call_returns_fresh_properties() -> None:
    first = resolve(CC, "WebFetch", {"url": "https://a.org"})
    first.properties["data"]["trust"] = "trusted"
    assert resolve(CC, "WebFetch", {"url": "https://a.org"}).properties["data"] == {
        "trust": "external"
    }


def test_public_api() -> None:
    assert sorted(charter_templates.__all__) == sorted(
        [
            "resolve",
            "load_templates",
            "TemplateSet",
            "TemplateError",
            "Resolution",
            "EFFECT_CLASSES",
            "builtin_sources",
            "template_documents",
            "templates_from_documents",
        ]
    )
    assert EFFECT_CLASSES == ("none", "read_only", "idempotent", "non_idempotent")
    assert issubclass(TemplateError, ValueError)


def test_import_is_cheap() -> None:
    code = "import sys, charter_templates; print('yaml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_documents_round_trip_through_json(tmp_path) -> None:
    import json

    from charter_templates import builtin_sources, template_documents, templates_from_documents

    user = tmp_path / "mine.yaml"
    user.write_text("integration: claude_code\ntools:\n  Deploy: {kind: step.exec}\n")
    builtin = json.loads(json.dumps(template_documents(builtin_sources())))
    (mine,) = template_documents([(str(user), user.read_text())])
    rebuilt = templates_from_documents(builtin, json.loads(json.dumps(mine)))
    direct = load_templates(user)
    for name, args in [("Deploy", {}), ("Bash", {"command": "ls"}), ("Read", {"file_path": "a"})]:
        assert resolve(CC, name, args, overrides=rebuilt) == resolve(
            CC, name, args, overrides=direct
        )
    # Data is checked as the YAML would be: a bad entry is refused naming its file.
    bad = [[str(user), [{"integration": "claude_code", "tools": {"X": {"kind": "nope"}}}]]]
    with pytest.raises(TemplateError, match=r"mine\.yaml"):
        templates_from_documents(builtin, bad[0])


def test_default_templates_are_cached() -> None:
    assert load_templates() is load_templates()
    assert {"claude_code", "generic"} <= set(load_templates().integrations)
    assert any(s.endswith("claude_code.yaml") for s in load_templates().sources)


# --- words --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("send_email", ("send", "email")),
        ("getUserProfile", ("get", "user", "profile")),
        ("HTTPRequestTool", ("http", "request", "tool")),
        ("list-files.v2", ("list", "files", "v", "2")),
        ("getURLs", ("get", "urls")),
        ("Read a file's content", ("read", "a", "file", "s", "content")),
        ("", ()),
        ("__--..", ()),
    ],
)
def test_split_words(name: str, words: tuple[str, ...]) -> None:
    assert split_words(name) == words


# --- JSON safety --------------------------------------------------------------------------


class _Weird(str):
    def __str__(self) -> str:
        return "<not the value>"


class _BrokenMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("broken")

    def __iter__(self) -> Iterator[str]:
        return iter(["command"])

    def __len__(self) -> int:
        return 1


def test_non_json_args_never_leak() -> None:
    args = {
        "command": object(),
        "file_path": b"/etc/passwd",
        "url": _Weird("https://Example.org"),
        "path": ["ok", 3],
        "query": {"nested": "dict"},
        "description": 42,
    }
    for integration, name in [(CC, "Bash"), (CC, "Read"), (CC, "WebFetch"), ("generic", "x")]:
        props = resolve(integration, name, args).properties
        assert json.loads(json.dumps(props)) == props
    bash = resolve(CC, "Bash", args).properties
    assert "exec" not in bash
    web = resolve(CC, "WebFetch", args).properties
    assert web["target"] == {"url": "https://Example.org", "host": "example.org"}
    assert type(web["target"]["url"]) is str


def test_broken_or_missing_args_do_not_raise() -> None:
    assert resolve(CC, "Bash", _BrokenMapping()).properties == {
        "tool": {"name": "Bash", "effect": "non_idempotent"}
    }
    assert resolve(CC, "Bash", "ls -la").kind == "step.exec"  # type: ignore[arg-type]
    assert resolve(CC, None).kind == "step.unknown"  # type: ignore[arg-type]
    assert resolve(None, "get_balance").verb == "GET"  # type: ignore[arg-type]


_JSON_LEAVES = (str, int, float, bool, type(None))


def _json_safe(value: object) -> bool:
    if isinstance(value, dict):
        return all(type(k) is str and _json_safe(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_safe(v) for v in value)
    return type(value) in _JSON_LEAVES


_any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(),
    st.binary(),
    st.lists(st.one_of(st.text(), st.integers()), max_size=3),
    st.builds(object),
)
_arg_names = st.sampled_from(
    ["command", "file_path", "path", "url", "query", "to", "recipients", "pattern", "uri"]
)


@settings(max_examples=300, deadline=None)
@given(
    integration=st.one_of(
        st.sampled_from([CC, "generic", "langchain", "crewai", "llamaindex", "mcp"]), st.text()
    ),
    name=st.one_of(
        st.text(),
        st.from_regex(r"mcp__[a-z_]{0,6}__[A-Za-z_]{0,12}", fullmatch=True),
        st.lists(
            st.sampled_from(["get", "send", "email", "delete", "password", "or", "pay", "web"]),
            max_size=4,
        ).map("_".join),
    ),
    args=st.one_of(st.none(), st.dictionaries(st.one_of(_arg_names, st.text()), _any_value)),
)
def test_any_name_resolves_to_a_valid_pair(
    integration: str, name: str, args: dict[str, Any] | None
) -> None:
    kind, verb, props, effect = resolve(integration, name, args)
    assert kind in KINDS
    assert is_valid_pair(kind, verb)
    assert verb is None or verb in VALID_VERBS[kind]
    assert effect in EFFECT_CLASSES
    assert _json_safe(props)
    assert props["tool"]["name"] == name
    assert props["tool"]["effect"] == effect


@settings(max_examples=300, deadline=None)
@given(
    integration=st.sampled_from([CC, "generic", "langchain", "crewai", "llamaindex", "mcp"]),
    name=st.one_of(
        st.sampled_from(["Bash", "Read", "WebFetch", "Grep", "send_email", "get_weather"]),
        st.lists(
            st.sampled_from(["get", "send", "email", "delete", "fetch", "file", "web", "run"]),
            max_size=3,
        ).map("_".join),
    ),
    args=st.dictionaries(
        st.one_of(_arg_names, st.sampled_from(["city", "body", "id"])),
        st.one_of(st.text(max_size=20), st.just("https://example.com/a"), st.integers()),
        max_size=4,
    ),
)
def test_a_dict_of_arguments_resolves_as_any_mapping_of_them(
    integration: str, name: str, args: dict[str, Any]
) -> None:
    # A plain dict holding none of the names the template reads skips asking for each;
    # a read-only view of the same arguments is asked name by name, and must agree.
    assert resolve(integration, name, args) == resolve(
        integration, name, types.MappingProxyType(args)
    )


# --- overrides ----------------------------------------------------------------------------


def _write(tmp_path: Path, text: str, name: str = "templates.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_user_entry_wins_and_others_are_kept(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        integration: claude_code
        tools:
          Bash: {kind: step.exec, effect: idempotent, properties: {exec.command: cmd}}
          Deploy: {kind: step.gate}
        """,
    )
    mine = load_templates(path)
    assert isinstance(mine, TemplateSet)
    bash = resolve(CC, "Bash", {"cmd": "make", "command": "ignored"}, overrides=mine)
    assert (bash.kind, bash.effect) == ("step.exec", "idempotent")
    assert bash.properties["exec"] == {"command": "make"}
    assert resolve(CC, "Deploy", overrides=mine).kind == "step.gate"
    # Untouched built-ins survive, and the defaults themselves are unchanged.
    assert resolve(CC, "Read", overrides=mine).verb == "GET"
    assert resolve(CC, "mcp__fs__read_file", overrides=mine).verb == "GET"
    assert resolve(CC, "Bash").effect == "non_idempotent"
    assert str(path) in mine.sources


def test_user_rules_go_first_and_replace_by_name(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        integration: generic
        rules:
          - name: tickets
            words: [ticket]
            kind: step.message
            verb: from_name
            default_verb: POST
          - name: exec
            words: [sandbox]
            kind: step.exec
        """,
    )
    mine = load_templates(path)
    assert tuple(resolve("generic", "open_ticket", overrides=mine))[:2] == ("step.message", "POST")
    assert resolve("generic", "list_tickets", overrides=mine).verb == "GET"
    assert resolve("generic", "sandbox", overrides=mine).kind == "step.exec"
    # The built-in exec rule was replaced by name, so "shell" no longer means exec ...
    assert resolve("generic", "shell", overrides=mine).kind == "step.unknown"
    # ... while other built-in rules still apply, also through claude_code's fallback.
    assert resolve("generic", "send_email", overrides=mine).kind == "step.message"
    assert resolve(CC, "mcp__jira__create_ticket", overrides=mine).kind == "step.message"


def test_user_verbs_and_new_integration(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        integration: generic
        verbs: {GET: [post]}
        ---
        integration: my-framework
        tools:
          special: {kind: step.model}
        """,
    )
    mine = load_templates(path)
    assert resolve("generic", "post_webpage", overrides=mine).verb == "GET"
    assert resolve("my_framework", "special", overrides=mine).kind == "step.model"
    assert resolve("my_framework", "special", overrides=mine).effect == "none"
    assert resolve("my_framework", "delete_file", overrides=mine).verb == "DELETE"
    assert "my_framework" in mine.integrations


def test_templateset_resolve_method(tmp_path: Path) -> None:
    mine = load_templates(_write(tmp_path, "integration: generic\n"))
    assert tuple(mine.resolve("generic", "get_balance"))[:2] == ("step.resource", "GET")
    assert "generic" in repr(mine)


# --- errors -------------------------------------------------------------------------------


def _error(tmp_path: Path, text: str) -> TemplateError:
    path = _write(tmp_path, text)
    with pytest.raises(TemplateError) as info:
        load_templates(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert info.value.file == str(path)
    return info.value


def test_error_bad_kind_names_file_entry_key_and_fix(tmp_path: Path) -> None:
    error = _error(tmp_path, "integration: claude_code\ntools:\n  Bash: {kind: step.shell}\n")
    assert error.where == "tools.Bash.kind"
    assert "templates.yaml: tools.Bash.kind: 'step.shell' is not a kind; use one of" in str(error)
    assert "step.exec" in str(error)


@pytest.mark.parametrize(
    ("text", "where", "fragments"),
    [
        (
            "integration: generic\ntools:\n  x: {kind: step.exec, verb: GET}\n",
            "tools.x.verb",
            ["step.exec does not take verb GET", "step.exec takes no verb"],
        ),
        (
            "integration: generic\ntools:\n  x: {kind: step.message, verb: DELETE}\n",
            "tools.x.verb",
            ["step.message takes GET, POST"],
        ),
        (
            "integration: generic\ntools:\n  x: {kind: step.resource}\n",
            "tools.x.verb",
            ["step.resource does not take verb None", "takes GET, POST, PATCH, DELETE"],
        ),
        (
            "integration: generic\ntools:\n  x: {kind: step.resource, verb: GIT}\n",
            "tools.x.verb",
            ["'GIT' is not a verb", "use one of GET, POST, PATCH, DELETE"],
        ),
        (
            "integration: generic\ntools:\n  x: {kind: step.exec, effect: safe}\n",
            "tools.x.effect",
            ["'safe' is not an effect class", "none, read_only, idempotent, non_idempotent"],
        ),
        (
            "integration: generic\ntools:\n  x: {kinds: step.exec}\n",
            "tools.x.kinds",
            ["unknown key 'kinds'", "did you mean kind?"],
        ),
        (
            "integration: generic\ntools:\n  x: {verb: GET}\n",
            "tools.x",
            ["missing key 'kind'"],
        ),
        (
            "integration: generic\ntools:\n  'Search it': {kind: step.gate, set: {tool.name: a}}\n",
            "tools['Search it'].set.tool.name",
            ["tool.name is always set by the resolver", "remove it"],
        ),
        (
            "integration: generic\nset: {data.trust: [a]}\n",
            "set.data.trust",
            ["is not a plain value"],
        ),
        (
            "integration: generic\nproperties: {target.url: url}\nset: {target.url: x}\n",
            "set.target.url",
            ["also under properties", "keep one"],
        ),
        (
            "integration: generic\nderive: {target.host: {hostname: url}}\n",
            "derive.target.host",
            ["is not a derivation", "host_of"],
        ),
        (
            "integration: generic\nrules:\n  - {name: r, kind: step.message, verb: from_name, "
            "only_verbs: [DELETE]}\n",
            "rules.r.only_verbs",
            ["step.message takes GET, POST"],
        ),
        (
            "integration: generic\nrules:\n  - {name: r, kind: step.exec, verb: from_name}\n",
            "rules.r.verb",
            ["step.exec takes no verb"],
        ),
        (
            "integration: generic\nrules:\n  - {name: r, kind: step.resource, verb: from_name, "
            "only_verbs: [GET], default_verb: POST}\n",
            "rules.r.default_verb",
            ["POST is not among the verbs", "use one of GET"],
        ),
        (
            "integration: generic\nrules:\n  - {name: r, kind: step.gate, words: [yes]}\n",
            "rules.r.words",
            ["True is not a word", "quote it"],
        ),
        (
            "integration: generic\nrules:\n  - {name: r, kind: step.gate}\n"
            "  - {name: r, kind: step.gate}\n",
            "rules.r",
            ["appears twice"],
        ),
        (
            "integration: claude_code\npatterns:\n  - {name: p, match: '(', resolve: t}\n",
            "patterns.p.match",
            ["not a regular expression"],
        ),
        (
            "integration: claude_code\npatterns:\n  - {name: p, match: '(?P<x>.+)', resolve: t}\n",
            "patterns.p.resolve",
            ["no group named 't'"],
        ),
        (
            "integration: claude_code\nverbs: {GET: [peek]}\n",
            "verbs",
            ["only the generic template has verb words"],
        ),
        (
            "integration: generic\nverbs: {FETCH: [peek]}\n",
            "verbs.FETCH",
            ["'FETCH' is not a verb"],
        ),
        (
            "integration: claude_code\nextends: nowhere\n",
            "claude_code.extends",
            ["'nowhere' has no template"],
        ),
        (
            "integration: generic\nextends: claude_code\n",
            "generic.extends",
            ["loop", "break the loop"],
        ),
        (
            "tools: {}\n",
            "",
            ["missing key 'integration'", "integration: claude_code"],
        ),
        (
            "integration: generic\nunknown_section: 1\n",
            "unknown_section",
            ["unknown key 'unknown_section'"],
        ),
        (
            "integration: generic\n---\nintegration: generic\n",
            "document 2, integration",
            ["already has a document"],
        ),
    ],
)
def test_error_messages(tmp_path: Path, text: str, where: str, fragments: list[str]) -> None:
    error = _error(tmp_path, text)
    assert error.where == where
    message = str(error)
    if where:
        assert f"templates.yaml: {where}: " in message
    assert "; " in message
    for fragment in fragments:
        assert fragment in message


def test_error_yaml_syntax_names_line(tmp_path: Path) -> None:
    error = _error(tmp_path, "integration: generic\ntools: {Bash: [\n")
    assert error.where is not None and error.where.startswith("line ")


def test_error_duplicate_keys(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        "integration: generic\ntools:\n  Bash: {kind: step.exec}\n  Bash: {kind: step.gate}\n",
    )
    assert "'Bash' appears twice" in str(error)
    assert error.where == "line 4, column 3"


def test_error_empty_and_non_mapping_files(tmp_path: Path) -> None:
    assert "holds no template" in str(_error(tmp_path, "# nothing\n"))
    assert "must be a mapping" in str(_error(tmp_path, "- a\n- b\n"))


def test_error_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(TemplateError, match=r"nope\.yaml: cannot be read"):
        load_templates(missing)
