"""`charter serve` as a real subprocess: the protocol over its unix socket and over HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from charter.serve import Client, ClientError, read_key, server_folder

POLICIES = """\
name: serve-test
version: 1
policies:
  - name: no-rm-rf
    rule_type: field_matches
    severity: critical
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: 'rm\\s+-rf'}
  - name: deletes-need-approval
    rule_type: deny
    severity: high
    action: ask
    match: {kinds: [step.resource], verbs: [DELETE]}
  - name: no-send-after-secrets
    rule_type: forbid_after
    severity: critical
    match: {kinds: [step.message]}
    params: {after: {kinds: [step.credential]}}
"""


class ServeProcess:
    """``charter serve`` for one project, started and stopped as a person would."""

    def __init__(self, project: Path, env: dict[str, str], *extra: str) -> None:
        self.project = project
        self.env = env
        self.extra = list(extra)
        self.folder = Path(server_folder(project, env))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServeProcess:
        charter = str(Path(sys.executable).parent / "charter")
        argv = [charter, "serve", "--project-dir", str(self.project), *self.extra]
        self.proc = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(1200):  # bounded: up to about a minute on a loaded machine
            if self.proc.poll() is not None:
                raise AssertionError(f"charter serve exited: {self.proc.stderr.read().decode()}")
            if (self.folder / "server.json").exists():
                try:
                    self.client().call("hello")
                    return self
                except ClientError:
                    pass
            time.sleep(0.05)
        raise AssertionError("charter serve did not come up")

    def client(self) -> Client:
        return Client(self.folder / "charter.sock", key=read_key(self.folder), timeout=30)

    @property
    def http(self) -> str:
        return json.loads((self.folder / "server.json").read_text())["http"]

    @property
    def token(self) -> str:
        return (self.folder / "token").read_text().strip()

    def stop(self) -> str:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return err.decode()


def _env(base: Path) -> dict[str, str]:
    home = base / "home"
    home.mkdir()
    out = {k: v for k, v in os.environ.items() if not k.startswith("CHARTER_")}
    out["HOME"] = str(home)
    return out


def _project(base: Path) -> Path:
    p = base / "proj"
    p.mkdir()
    (p / "policies.yaml").write_text(POLICIES, encoding="utf-8")
    return p


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return _env(tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _project(tmp_path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """One server for the protocol tests (each starts tasks of its own)."""
    base = tmp_path_factory.mktemp("served")
    project = _project(base)
    s = ServeProcess(
        project, _env(base), "--policy", str(project / "policies.yaml"), "--http", "127.0.0.1:0"
    ).start()
    yield s
    if s.proc is not None and s.proc.poll() is None:
        s.stop()


def _post(url: str, body: Any, token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_task_through_the_socket_allow_block_ask_and_record(server: ServeProcess) -> None:
    client = server.client()
    hello = client.call("hello")
    assert hello["protocol"] == 1 and hello["project"] == str(server.project)
    tid = client.call("start_task", {"name": "ts-agent"})["task_id"]
    ls = client.call(
        "step", {"task_id": tid, "kind": "step.exec", "name": "sh", "input": {"command": "ls"}}
    )
    assert ls["decision"] == "allow" and ls["action_id"]
    assert client.call(
        "record", {"action_id": ls["action_id"], "outcome": "ok", "output": {"x": 1}}
    )["recorded"]
    rm = client.call(
        "step",
        {"task_id": tid, "kind": "step.exec", "name": "sh", "input": {"command": "rm -rf /"}},
    )
    assert rm["decision"] == "block" and rm["violations"][0]["policy"] == "no-rm-rf"
    ask = client.call(
        "step",
        {
            "task_id": tid,
            "kind": "step.resource",
            "verb": "DELETE",
            "name": "rm_file",
            "input": {"path": "a"},
        },
    )
    assert ask["decision"] == "ask" and ask["digest"]
    approved = client.call(
        "answer", {"approval_id": ask["approval_id"], "approve": True, "by": "ops"}
    )
    assert approved["decision"] == "allow" and approved["approved"] is True
    client.call(
        "record", {"action_id": approved["action_id"], "outcome": "failed", "error": "disk full"}
    )
    assert client.call("end_task", {"task_id": tid})["ended"]  # waits for its records
    import charter

    records = charter.open_store(f"sqlite:///{server.project}/.charter/audit.db").read_task(tid)
    outcomes = [
        (r["step_name"], r["meta"].get("charter.outcome"))
        for r in records
        if r["kind"] != "task.start"
    ]
    assert outcomes[:4] == [
        ("sh", "ok"),
        ("sh", "blocked"),
        ("approval", None),  # the step.gate of the answer
        ("rm_file", "failed"),
    ]
    assert charter.verify(f"sqlite:///{server.project}/.charter/audit.db").ok


def test_bad_requests_name_the_field_and_never_end_the_connection(server: ServeProcess) -> None:
    client = server.client()
    cases = [
        ("step", {"kind": "step.exec", "name": "x"}, "params.task_id"),
        ("start_task", {"name": 3}, "params.name"),
        ("record", {"action_id": "nope", "outcome": "fine"}, "params.outcome"),
        ("record", {"action_id": "nope", "outcome": "ok"}, "params.action_id"),
        ("answer", {"approval_id": "a", "approve": "yes", "by": "me"}, "params.approve"),
        ("no_such_op", {}, "op"),
    ]
    tid = client.call("start_task", {"name": "t"})["task_id"]
    cases.append(("step", {"task_id": tid, "kind": "step.bogus", "name": "x"}, "params.kind"))
    cases.append(
        ("step", {"task_id": tid, "kind": "step.exec", "verb": "GET", "name": "x"}, "params.verb")
    )
    for op, params, field in cases:
        with pytest.raises(ClientError) as caught:
            client.call(op, params)
        assert caught.value.field == field, (op, params, str(caught.value))
        assert str(caught.value)
    # Raw garbage on the same socket: an error line, and the next request is still served.
    import socket

    from charter._runtime.project_files import socket_address

    address, fd = socket_address(server.folder / "charter.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(address)
    if fd is not None:
        os.close(fd)
    sock.sendall(
        b"this is not json\n[1,2]\n" + json.dumps({"v": 1, "id": 7, "op": "hello"}).encode() + b"\n"
    )
    reader = sock.makefile("rb")
    first, second, third = (json.loads(reader.readline()) for _ in range(3))
    assert first["ok"] is False and "not JSON" in first["error"]["message"]
    assert second["ok"] is False and "not an object" in second["error"]["message"]
    assert third["ok"] is True and third["id"] == 7
    sock.close()
    assert client.call("hello")["protocol"] == 1


def test_http_needs_the_token_and_serves_openapi(server: ServeProcess) -> None:
    base = server.http
    assert base.startswith("http://127.0.0.1:")
    code, body = _post(f"{base}/v1/start_task", {"name": "t"}, None)
    assert code == 401 and body["error"]["code"] == "unauthorized"
    code, body = _post(f"{base}/v1/start_task", {"name": "t"}, "0" * 64)
    assert code == 401
    code, body = _post(f"{base}/v1/start_task", {"name": "t"}, server.token)
    assert code == 200 and body["ok"]
    tid = body["result"]["task_id"]
    code, body = _post(
        f"{base}/v1/step",
        {"task_id": tid, "kind": "step.exec", "name": "sh", "input": {"command": "rm -rf ~"}},
        server.token,
    )
    assert code == 200 and body["result"]["decision"] == "block"
    code, body = _post(f"{base}/v1/step", {"task_id": tid, "name": "sh"}, server.token)
    assert code == 400 and body["error"]["field"] == "params.kind"
    with urllib.request.urlopen(f"{base}/v1/openapi.json", timeout=30) as response:
        doc = json.loads(response.read())
    assert doc["openapi"].startswith("3.1") and "/v1/step" in doc["paths"]
    assert doc["paths"]["/v1/step"]["post"]["security"] == [{"bearer": []}]


def test_a_restart_restores_the_task_from_the_store(project: Path, env: dict[str, str]) -> None:
    args = ("--policy", str(project / "policies.yaml"))
    first = ServeProcess(project, env, *args).start()
    client = first.client()
    tid = client.call("start_task", {"name": "t"})["task_id"]
    read = client.call(
        "step", {"task_id": tid, "kind": "step.credential", "verb": "GET", "name": "vault_read"}
    )
    client.call(
        "record",
        {"action_id": read["action_id"], "outcome": "ok", "output": {"secret": "[masked]"}},
    )
    assert "stopped" in first.stop()  # SIGTERM: the buffered store is flushed on the way out
    assert not (first.folder / "charter.sock").exists()
    second = ServeProcess(project, env, *args).start()
    try:
        send = second.client().call(
            "step",
            {
                "task_id": tid,
                "kind": "step.message",
                "verb": "POST",
                "name": "send_email",
                "input": {"to": "x@example.com"},
            },
        )
        assert send["decision"] == "block"
        assert send["violations"][0]["policy"] == "no-send-after-secrets"
    finally:
        second.stop()


def test_one_server_per_project_and_a_stale_socket_is_cleaned(
    project: Path, env: dict[str, str]
) -> None:
    first = ServeProcess(project, env).start()
    charter = str(Path(sys.executable).parent / "charter")
    second = subprocess.run(
        [charter, "serve", "--project-dir", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert f"pid {first.proc.pid}" in second.stderr and "owns" in second.stderr
    assert first.client().call("hello")  # the first one is still serving
    first.proc.kill()  # no clean-up: the socket file stays behind
    first.proc.wait(timeout=30)
    assert (first.folder / "charter.sock").exists()
    again = ServeProcess(project, env).start()
    assert again.client().call("hello")["protocol"] == 1
    assert oct((again.folder / "charter.sock").stat().st_mode & 0o777) == "0o600"
    assert oct(again.folder.stat().st_mode & 0o777) == "0o700"
    again.stop()


def test_http_refuses_a_public_address_unless_forced(project: Path) -> None:
    from charter._cli import main
    from click.testing import CliRunner

    done = CliRunner().invoke(main, ["serve", "--project-dir", str(project), "--http", "0.0.0.0:0"])
    assert done.exit_code == 1
    assert "loopback" in done.output and "--allow-remote" in done.output


def test_exchange_asks_one_line_and_sign_is_the_proof_a_client_checks(
    server: ServeProcess, tmp_path: Path
) -> None:
    from charter._runtime.project_files import canonical_result
    from charter.serve import exchange, sign

    key = read_key(server.folder)
    assert key is not None
    sock = str(server.folder / "charter.sock")
    nonce = os.urandom(16).hex()
    line = exchange(
        sock, json.dumps({"v": 1, "id": 3, "op": "hello", "nonce": nonce}).encode() + b"\n", 30
    )
    reply = json.loads(line)
    assert reply["ok"] is True and reply["id"] == 3
    assert reply["proof"] == sign(key, nonce, canonical_result(reply["result"]))
    assert reply["proof"] != sign(key, os.urandom(16).hex(), canonical_result(reply["result"]))
    with pytest.raises(ClientError) as caught:
        exchange(str(tmp_path / "nothing.sock"), b"{}\n", 5)
    assert caught.value.code == "unavailable"


def test_sign_is_hmac_sha256() -> None:
    import hashlib
    import hmac

    from charter.serve import sign

    for key in ("", "ab" * 32, "k" * 65, "x" * 200):
        for data in (b"", b"{}", os.urandom(300)):
            expected = hmac.new(key.encode(), b"n0nce\n" + data, hashlib.sha256).hexdigest()
            assert sign(key, "n0nce", data) == expected


def test_importing_charter_serve_loads_no_json_socket_or_openssl() -> None:
    """Hooks import charter.serve on every call; Client (json, socket) loads on first use."""
    heavy = ("json", "socket", "hashlib", "hmac", "_hashlib", "threading", "typing", "re")
    code = (
        "import sys, charter.serve; from charter.serve import exchange, sign, key_digest; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
