"""Tests for charter._policy.secrets, the secret shapes shared by no_secrets and the redactor.

Every credential below is fake and assembled from pieces at run time, so no file in the
repository contains anything that looks like a real token to a secret scanner.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
import re2
from charter._policy.secrets import (
    _ANCHORS,
    _B64_BYTES,
    _DOTTED_SHAPES,
    _HEX_RUN_SHAPES,
    _MIN_RUN,
    SECRET_SHAPES,
    SecretFinding,
    SecretShape,
    _all_shapes_scanner,
    _combined,
    _long_runs,
    _may_contain,
    _without_captures,
    contains_secret,
    contains_secret_in_any,
    find_secrets,
    mask_secrets,
    shape_names,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st


def _fill(alphabet: str, length: int) -> str:
    """``length`` characters cycling through ``alphabet``: obviously not random."""
    return (alphabet * (length // len(alphabet) + 1))[:length]


def _b64url(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def _pem(label: str, body_lines: int = 3) -> str:
    body = "\n".join(_fill("FakeKeyMaterial0", 64) for _ in range(body_lines))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


_HEX = "deadbeef"
_FAKE_UUID = "deadbeef-0000-4000-8000-" + _fill(_HEX, 12)


@dataclass(frozen=True)
class Sample:
    """``text`` contains the fake ``secret``, which must be found as ``shape``."""

    shape: str
    text: str
    secret: str


def _token(shape: str, secret: str) -> Sample:
    """A secret that is recognisable on its own, with no surrounding context."""
    return Sample(shape, secret, secret)


def _valued(shape: str, before: str, secret: str, after: str = "") -> Sample:
    """A secret recognised by its context: only the value is the finding."""
    return Sample(shape, before + secret + after, secret)


_JWT = ".".join(
    [
        _b64url('{"alg":"HS256","typ":"JWT"}'),
        _b64url('{"sub":"fake-user","name":"Not A Real Token"}'),
        _fill("FakeSignature0_-", 43),
    ]
)

SAMPLES: tuple[Sample, ...] = (
    _token("ssh_private_key", _pem("OPENSSH " + "PRIVATE KEY")),
    _token("private_key_block", _pem("RSA " + "PRIVATE KEY")),
    _valued(
        "gcp_private_key_id",
        '{"type": "service_account", "project_id": "fake", "private_key_id": "',
        _fill(_HEX, 40),
        '"}',
    ),
    _token("aws_access_key_id", "AKIA" + _fill("FAKE", 16)),
    _valued("aws_secret_access_key", "aws_secret_access_key = ", _fill("FakeSecretKey/0+", 40)),
    _token("google_api_key", "AIza" + _fill("Fake_Key-0", 35)),
    _token("google_oauth_client_secret", "GOCSPX-" + _fill("FakeSecret0", 28)),
    _token("google_oauth_access_token", "ya29." + _fill("Fake-Access_Token0", 54)),
    _valued(
        "azure_storage_key",
        "DefaultEndpointsProtocol=https;AccountName=fakeacct;AccountKey=",
        _fill("FakeKey0+/", 86) + "==",
        ";EndpointSuffix=core.windows.net",
    ),
    _valued(
        "azure_sas_signature",
        "https://fakeacct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig=",
        _fill("FakeSig0%2B", 44) + "%3D",
    ),
    _valued("azure_ad_client_secret", "client_secret=", "Fak8Q~" + _fill("Fake.Secret_0~", 34)),
    _token("github_token", "ghp_" + _fill("FAKE0", 36)),
    _token("gitlab_token", "glpat-" + _fill("FakeToken0", 20)),
    _token("slack_token", "xoxb-" + "000000000000-0000000000000-" + _fill("FakeSlack0", 24)),
    _valued(
        "slack_webhook_url",
        "https://hooks.slack.com/services/",
        "T00000000/B00000000/" + _fill("FAKEfake0", 24),
    ),
    _valued(
        "discord_webhook_url",
        "https://discord.com/api/webhooks/000000000000000000/",
        _fill("Fake_Webhook-Token0", 68),
    ),
    _token("stripe_key", "sk_" + "live_" + _fill("FakeStripeKey0", 24)),
    _token("stripe_webhook_secret", "whsec_" + _fill("FakeWebhookSecret0", 32)),
    _token("anthropic_api_key", "sk-" + "ant-" + "api03-" + _fill("Fake_Anthropic-Key0", 95)),
    _token("openai_api_key", "sk-" + "proj-" + _fill("Fake_OpenAI-Key0", 64)),
    _token("groq_api_key", "gsk_" + _fill("FakeGroqKey0", 52)),
    _token("xai_api_key", "xai-" + _fill("FakeXaiKey0", 80)),
    _token("perplexity_api_key", "pplx-" + _fill("FakePplxKey0", 48)),
    _token("replicate_api_token", "r8_" + _fill("FakeReplicate0", 37)),
    _token("huggingface_token", "hf_" + _fill("FakeHuggingFace0", 34)),
    _token("npm_token", "npm_" + _fill("FakeNpmToken0", 36)),
    _valued("npmrc_auth_token", "//registry.npmjs.org/:_authToken=", _fill("FakeAuth0-", 24)),
    _token("pypi_token", "pypi-" + "AgEIcHlwaS5vcmc" + _fill("FakePyPIToken0", 60)),
    _token("twilio_key", "SK" + _fill(_HEX, 32)),
    _token(
        "sendgrid_api_key",
        "SG." + _fill("FakeSendGrid0", 22) + "." + _fill("FakeSendGridSecret0", 43),
    ),
    _token("mailgun_api_key", "key-" + _fill(_HEX, 32)),
    _token("mailchimp_api_key", _fill(_HEX, 32) + "-us12"),
    _token(
        "discord_bot_token",
        "M" + _fill("FakeDiscordBotId0", 23) + ".FakeTs." + _fill("FakeDiscordHmac0", 27),
    ),
    _valued(
        "telegram_bot_token",
        "https://api.telegram.org/bot",
        "123456789:AA" + _fill("FakeTelegramToken0", 33),
        "/getMe",
    ),
    _token("shopify_token", "shpat_" + _fill(_HEX, 32)),
    _token("square_token", "sq0atp-" + _fill("FakeSquareTok0", 22)),
    _token("digitalocean_token", "dop_v1_" + _fill(_HEX, 64)),
    _valued("heroku_api_key", "HEROKU_API_KEY=", _FAKE_UUID),
    _token("databricks_token", "dapi" + _fill(_HEX, 32)),
    _token("atlassian_api_token", "ATATT3" + _fill("xFakeAtlassianToken0", 180)),
    _token("hashicorp_vault_token", "hvs." + _fill("FakeVaultToken0", 90)),
    _token(
        "terraform_cloud_token",
        _fill("FakeTfTokenId0", 14) + ".atlasv1." + _fill("FakeTerraformToken0", 67),
    ),
    _token("postman_api_key", "PMAK-" + _fill(_HEX, 24) + "-" + _fill(_HEX, 34)),
    _token("age_secret_key", "AGE-SECRET-KEY-1" + _fill("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)),
    _token("grafana_token", "glsa_" + _fill("FakeGrafanaToken0", 32) + "_" + _HEX),
    _token("newrelic_api_key", "NRAK-" + _fill("FAKENEWRELIC0", 27)),
    _token("sentry_auth_token", "sntrys_" + _fill("FakeSentryToken0", 60)),
    _token("linear_api_key", "lin_api_" + _fill("FakeLinearKey0", 40)),
    _token("doppler_token", "dp.pt." + _fill("FakeDopplerToken0", 43)),
    _token(
        "mapbox_secret_token",
        "sk.eyJ" + _fill("FakeMapbox0", 30) + "." + _fill("FakeMapboxSig0", 22),
    ),
    _token("notion_token", "ntn_" + _fill("FakeNotionToken0", 46)),
    _token("airtable_token", "pat" + _fill("FakeAirtable0", 14) + "." + _fill(_HEX, 64)),
    _token("supabase_token", "sbp_" + _fill(_HEX, 40)),
    _token("pulumi_token", "pul-" + _fill(_HEX, 40)),
    _token("onepassword_service_token", "ops_eyJ" + _fill("FakeOnePasswordToken0", 120)),
    _token("jwt", _JWT),
    _valued("bearer_token", "Authorization: Bearer ", _fill("FakeBearer0.Token-", 36)),
    _valued(
        "basic_auth_header",
        "Authorization: Basic ",
        base64.b64encode(b"fakeuser:fake-password-0").decode(),
    ),
    _valued(
        "curl_user_password",
        "curl -sS -u fakeuser:",
        "FakeCurlPass0",
        " https://api.example.com/v1/items",
    ),
    _valued("mysql_cli_password", "mysql -h db.example.com -u root -p", "FakeMysqlPass0", " app"),
    _valued(
        "database_connection_string",
        "postgres://app:",
        "FakeDbPass0",
        "@db.example.com:5432/app",
    ),
    _valued("url_credentials", "https://deploy:", "FakeUrlPass0", "@git.example.com/org/repo.git"),
    _valued("password_assignment", 'password = "', "Fake-Pass-0", '"'),
    _valued("secret_assignment", "client_secret: ", "Fake-Secret-0"),
    _valued("api_key_assignment", '"api_key": "', "FakeApiKey0", '"'),
    _valued("token_assignment", "ACCESS_TOKEN=", "FakeAccessToken"),
)

# More ways the same shapes turn up in practice.
VARIANTS: tuple[Sample, ...] = (
    _token("ssh_private_key", _pem("OPENSSH " + "PRIVATE KEY").replace("\n", "\r\n")),
    _token(
        "ssh_private_key",
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: fake\n"
        "Public-Lines: 2\n" + _fill("FakePublic0", 64) + "\n" + _fill("FakePublic0", 20) + "\n"
        "Private-Lines: 1\n" + _fill("FakePrivate0", 44),
    ),
    _token("private_key_block", _pem("EC " + "PRIVATE KEY")),
    _token("private_key_block", _pem("ENCRYPTED " + "PRIVATE KEY")),
    _token("private_key_block", _pem("PRIVATE " + "KEY")),
    _token("private_key_block", _pem("PGP " + "PRIVATE KEY BLOCK")),
    # Truncated (no END line): the BEGIN line and the body are still masked.
    _token(
        "private_key_block",
        "-----BEGIN RSA " + "PRIVATE KEY-----\n" + "\n".join([_fill("FakeKeyBody0", 64)] * 3),
    ),
    # One-line, YAML-indented and short-last-line forms.
    _token(
        "private_key_block",
        "-----BEGIN RSA "
        + "PRIVATE KEY----- "
        + " ".join([_fill("FakeKeyBody0", 64)] * 2)
        + " -----END RSA "
        + "PRIVATE KEY-----",
    ),
    _valued(
        "private_key_block",
        "tls:\n  key: |\n    ",
        _pem("EC " + "PRIVATE KEY").replace("\n", "\n    "),
        "\n  cert: none\n",
    ),
    _token(
        "private_key_block",
        "-----BEGIN " + "PRIVATE KEY-----\n" + _fill("FakeKeyBody0", 64) + "\nFakeTail\n"
        "-----END " + "PRIVATE KEY-----",
    ),
    _token("aws_access_key_id", "ASIA" + _fill("FAKE0", 16)),
    _valued("aws_secret_access_key", '"SecretAccessKey": "', _fill("FakeSecretKey/0+", 40), '"'),
    _valued("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY=", _fill("FakeSecretKey/0+", 40)),
    _token("github_token", "gho_" + _fill("FAKE0", 36)),
    _token("github_token", "ghs_" + _fill("FAKE0", 36)),
    _token("github_token", "github_pat_" + _fill("FAKE0", 22) + "_" + _fill("Fake0", 59)),
    _token("slack_token", "xoxp-" + "000000000000-000000000000-" + _fill("FakeSlack0", 32)),
    _token("stripe_key", "rk_" + "live_" + _fill("FakeStripeKey0", 24)),
    _token("stripe_key", "sk_" + "test_" + _fill("FakeStripeKey0", 24)),
    _token("openai_api_key", "sk-" + _fill("FakeOpenAIKey0", 48)),
    _token("twilio_key", "AC" + _fill(_HEX, 32)),
    _token("square_token", "EAAA" + _fill("FakeSquareToken0", 60)),
    _token("heroku_api_key", "HRKU-" + _fill("FakeHerokuKey0", 60)),
    _valued("heroku_api_key", '"heroku_token": "', _FAKE_UUID, '"'),
    _valued("bearer_token", '-H "Authorization: Bearer ', _fill("FakeBearer0.Token-", 36), '"'),
    _valued("database_connection_string", "mongodb+srv://app:", "FakeMongoPass0", "@cluster0/db"),
    _valued("database_connection_string", "redis://:", "FakeRedisPass0", "@cache:6379/0"),
    _valued("database_connection_string", "postgresql+psycopg2://u:", "p@ss-Fake0", "@db/app"),
    _valued("password_assignment", "PASSWORD=", "correcthorsebattery"),
    _valued("password_assignment", "export DB_PASSWORD=", "FakeDbPassword"),
    _valued("password_assignment", "DB_PASS=", "FakeDbPassword"),
    _valued("password_assignment", "  password: ", "Fake-Yaml-Pass-0"),
    _valued("password_assignment", "mysql_root_password = '", "Fake Passphrase 0", "'"),
    _valued("password_assignment", "login --password ", "Fake-Cli-Pass-0", " --user bob"),
    _valued("password_assignment", "connect(host, password=", "hunter2-fake", ")"),
    _valued("password_assignment", '{\\"password\\": \\"', "FakeEscaped0", '\\"}'),
    _valued("password_assignment", "Server=db;User Id=sa;Password=", "Fake-Pass-0", ";"),
    _valued("password_assignment", "if password == '", "Fake-Pass-0", "':"),
    _valued("secret_assignment", "JWT_SECRET=", "fakejwtsigningsecret"),
    _valued("secret_assignment", "private_key = '", "FakePrivateKeyValue0", "'"),
    _valued("api_key_assignment", "X-Api-Key: ", "fake-api-key-000"),
    _valued("api_key_assignment", 'apiKey := "', "FakeApiKey0", '"'),
    _valued("token_assignment", "https://api.example.com/v1?access_token=", "Fake0Token", "&p=2"),
    _valued("token_assignment", "refresh_token: ", "Fake-Refresh-0"),
)

# Contextual shapes report a recognisable token under the token's own shape.
REFINED: tuple[Sample, ...] = (
    _valued("github_token", "GITHUB_TOKEN=", "ghp_" + _fill("FAKE0", 36)),
    _valued("openai_api_key", 'OPENAI_API_KEY="', "sk-" + "proj-" + _fill("FakeKey0", 40), '"'),
    _valued("slack_token", "slack_token: ", "xoxb-" + "0000-0000-" + _fill("FakeSlack0", 24)),
    _valued("jwt", "Authorization: Bearer ", _JWT),
    _valued("github_token", "https://x-access-token:", "ghs_" + _fill("FAKE0", 36), "@github.com"),
    _valued("npm_token", "//registry.npmjs.org/:_authToken=", "npm_" + _fill("FakeNpm0", 36)),
    _valued("aws_access_key_id", "access_key: ", "AKIA" + _fill("FAKE", 16)),
    _valued(
        "slack_webhook_url",
        "webhook_secret: https://hooks.slack.com/services/",
        "T00000000/B00000000/" + _fill("FAKEfake0", 24),
    ),
)

ALL_POSITIVE = SAMPLES + VARIANTS + REFINED

NEGATIVES: tuple[str, ...] = (
    "",
    "token",
    "The token is refreshed every hour; ask the admin for a new password if it expires.",
    "Set your api key in the dashboard, then paste the secret into the vault.",
    "password: please choose a strong one",
    "Enter your password and token below.",
    "123e4567-e89b-12d3-a456-426614174000",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "sha256:" + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  archive.tar.gz",
    "/home/agent/projects/charter/core/src/charter/_secrets.py",
    "C:\\Users\\agent\\AppData\\Local\\Temp\\build.log",
    "~/.ssh/id_rsa and ~/.aws/credentials must never be read",
    'password = ""',
    "password = ''",
    "password: null",
    "password: ~",
    '"password": null',
    "password = None",
    "PASSWORD=",
    "login(user, password=password)",
    "password = self.password",
    "password: str",
    "password: SecretStr",
    "    password: Optional[str] = None",
    'password = os.environ["DB_PASSWORD"]',
    "password = getpass.getpass()",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    'token: "${{ secrets.GITHUB_TOKEN }}"',
    "PASSWORD=${DB_PASSWORD}",
    'api_key = "{api_key}"',
    'password = "<your-password>"',
    'password = "********"',
    "password_hash = 'pbkdf2:sha256'",
    "max_tokens = 100000",
    '"tokens": 1234567, "token_count": 12',
    "PWD=/home/agent/project",
    "OLDPWD=/tmp",
    "private_key = /etc/ssl/private/server.key",
    'private_key_path = "/etc/ssl/private/server.key"',
    'curl -H "Authorization: Bearer $TOKEN" https://api.example.com',
    "Authorization: Bearer <token>",
    "https://example.com/search?q=token&page=2",
    "git@github.com:anthropics/charter.git",
    "ssh://git@example.com:22/org/repo.git",
    "http://localhost:8080/health",
    "postgres://app@db.example.com:5432/app",
    "postgres://app:@db.example.com/app",
    "https://user:${PASSWORD}@example.com",
    "docker run -u 1000:1000 image",
    "mail agent@example.com about the password reset",
    "-----BEGIN PUBLIC KEY-----\n" + _fill("FakePublicKey0", 64) + "\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\n" + _fill("FakeCert0", 64) + "\n-----END CERTIFICATE-----",
    "ssh-ed25519 " + _fill("AAAAC3NzaC1lZDI1NTE5", 68) + " agent@example",
    "task-" + _fill("abcdef0123456789", 40),
    "The mask_secrets helper replaces each secret with [REDACTED:jwt].",
    "def rotate_token(token: str) -> str: ...",
    'if token == "lambda":',
    'Token:              "#cccccc",',
    '"input_token": "next_token", "AWS_SESSION_TOKEN": "session-token"',
    "ERRORTOKEN = token.ERRORTOKEN",
    "return OwnerRecord(pid=pid, token=token, lease_duration=duration)",
    "private_key = Ed25519PrivateKey.generate()",
    "def sign(private_key: ed25519.Ed25519PrivateKey, data: bytes) -> bytes: ...",
    "MLKEM768X25519PrivateKey = rust_openssl.hpke.MLKEM768X25519PrivateKey",
    "arn:aws:secretsmanager:us-west-2:123456789012:secret:db-creds-AbCdEf",
    "SECRET_KEY = 'development key'",
    "when the file has '-----BEGIN RSA " + "PRIVATE KEY-----' and '-----END RSA PRIVATE KEY-----'",
    '_SK_START = b"-----BEGIN OPENSSH ' + 'PRIVATE KEY-----"',
)


def _describe(sample: Sample) -> str:
    return f"{sample.shape}:{sample.text[:24]!r}"


def _assert_found(text: str, sample: Sample) -> None:
    findings = find_secrets(text)
    covered = [text[f.start : f.end] for f in findings if f.shape == sample.shape]
    assert sample.secret in covered, (sample.shape, findings)
    assert contains_secret(text)
    masked, count = mask_secrets(text)
    assert count >= 1
    assert sample.secret not in masked
    assert f"[REDACTED:{sample.shape}]" in masked


# --- the shapes themselves ----------------------------------------------------------------


def test_at_least_thirty_shapes_with_unique_snake_case_names() -> None:
    names = shape_names()
    assert len(names) >= 30
    assert len(set(names)) == len(names)
    assert names == tuple(shape.name for shape in SECRET_SHAPES)
    for shape in SECRET_SHAPES:
        assert isinstance(shape, SecretShape)
        assert re2.fullmatch(r"[a-z][a-z0-9_]*", shape.name), shape.name
        assert shape.description.endswith("."), shape.name


def test_every_pattern_compiles_with_re2() -> None:
    for shape in SECRET_SHAPES:
        re2.compile(shape.pattern)


def test_combined_pattern_has_one_named_group_per_shape() -> None:
    combined = re2.compile(_combined(shape_names()))
    index = combined.groupindex
    assert sorted(index, key=index.__getitem__) == list(shape_names())
    value_groups = sum(re2.compile(shape.pattern).groups for shape in SECRET_SHAPES)
    assert combined.groups == len(SECRET_SHAPES) + value_groups
    # What actually scans is the same alternation without groups.
    detector = _all_shapes_scanner().detector
    assert detector.groups == 0
    assert detector.pattern == _without_captures(_combined(shape_names()))


def _reference_matches(text: str) -> list[tuple[str, int, int]]:
    """(shape, start, end) of each match of the named alternation: the ground truth."""
    combined = _reference_regex()
    names = {index: name for name, index in combined.groupindex.items()}
    return [(names[m.lastindex], m.start(), m.end()) for m in combined.finditer(text)]


@functools.cache
def _reference_regex() -> Any:
    return re2.compile(_combined(shape_names()))


def _scanner_matches(text: str) -> list[tuple[str, int, int]]:
    scanner = _all_shapes_scanner()
    spans = [(m.start(), m.end()) for m in scanner.detector.finditer(text)]
    return [(scanner._identify(text, start, end)[0], start, end) for start, end in spans]


def test_every_shape_has_a_sample() -> None:
    assert {sample.shape for sample in SAMPLES} == set(shape_names())
    assert len(SAMPLES) >= 30


# --- positives ----------------------------------------------------------------------------


@pytest.mark.parametrize("sample", ALL_POSITIVE, ids=_describe)
def test_sample_is_found_and_masked(sample: Sample) -> None:
    assert sample.secret in sample.text
    _assert_found(sample.text, sample)
    assert _scanner_matches(sample.text) == _reference_matches(sample.text)


@pytest.mark.parametrize("sample", SAMPLES, ids=_describe)
def test_sample_is_found_inside_longer_text(sample: Sample) -> None:
    prose = f"Deploy notes for the staging cluster.\n{sample.text}\nRestart the worker after."
    _assert_found(prose, sample)
    document = json.dumps({"step": 3, "note": "from the agent", "output": sample.text})
    findings = find_secrets(document)
    # JSON escapes quotes and line breaks; the secret must still be fully covered.
    escaped = json.dumps(sample.secret)[1:-1]
    assert any(document[f.start : f.end] == escaped for f in findings), (sample.shape, findings)
    assert escaped not in mask_secrets(document)[0]


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if s.text == s.secret and "\n" not in s.secret], ids=_describe
)
def test_token_is_found_in_shell_commands_and_env_files(sample: Sample) -> None:
    command = f"curl -sS https://api.example.com/v1/items -d 'credential={sample.secret}' | jq ."
    _assert_found(command, sample)
    env_file = f"# staging\nDEBUG=1\nSERVICE_CREDENTIAL={sample.secret}\nREGION=eu-west-1\n"
    _assert_found(env_file, sample)
    yaml_doc = f"service:\n  credential: {sample.secret}\n  region: eu-west-1\n"
    _assert_found(yaml_doc, sample)


def test_assignment_masks_the_value_only() -> None:
    value = "Fake-Pass-0"
    masked, count = mask_secrets(f"DB_HOST=db\npassword={value}\n")
    assert (masked, count) == ("DB_HOST=db\npassword=[REDACTED:password_assignment]\n", 1)
    masked, _ = mask_secrets(f"postgres://app:{value}@db.example.com/app")
    assert masked == "postgres://app:[REDACTED:database_connection_string]@db.example.com/app"


def test_several_secrets_are_ordered_and_counted() -> None:
    aws = "AKIA" + _fill("FAKE", 16)
    ghp = "ghp_" + _fill("FAKE0", 36)
    text = f"first {aws} then password='Fake-Pass-0' and {ghp} and {aws}"
    findings = find_secrets(text)
    assert [f.shape for f in findings] == [
        "aws_access_key_id",
        "password_assignment",
        "github_token",
        "aws_access_key_id",
    ]
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    masked, count = mask_secrets(text)
    assert count == 4
    assert aws not in masked and ghp not in masked and "Fake-Pass-0" not in masked


def test_offsets_count_characters_not_bytes() -> None:
    aws = "AKIA" + _fill("FAKE", 16)
    text = f"clé: «{aws}» ✓"
    (finding,) = find_secrets(text)
    assert text[finding.start : finding.end] == aws
    assert finding == SecretFinding("aws_access_key_id", text.index(aws), text.index(aws) + 20)


# --- negatives ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", NEGATIVES)
def test_negative_corpus_has_no_findings(text: str) -> None:
    assert find_secrets(text) == []
    assert not contains_secret(text)
    assert mask_secrets(text) == (text, 0)


def test_redaction_markers_are_not_secrets() -> None:
    for name in shape_names():
        marker = f"[REDACTED:{name}]"
        for text in (marker, f"password={marker}", f"Authorization: Bearer {marker}", marker * 3):
            assert find_secrets(text) == [], text


# --- restricting shapes -------------------------------------------------------------------


def test_restricting_shapes() -> None:
    aws = "AKIA" + _fill("FAKE", 16)
    ghp = "ghp_" + _fill("FAKE0", 36)
    text = f"{aws} {ghp}"
    assert [f.shape for f in find_secrets(text, shapes=["github_token"])] == ["github_token"]
    assert [f.shape for f in find_secrets(text, shapes={"aws_access_key_id"})] == [
        "aws_access_key_id"
    ]
    assert find_secrets(text, shapes=("jwt",)) == []
    assert find_secrets(text, shapes="github_token") == find_secrets(text, ["github_token"])
    assert find_secrets(text, shapes=[]) == []
    assert not contains_secret(text, shapes=["jwt", "stripe_key"])
    assert contains_secret(text, shapes=["jwt", "github_token"])
    assert find_secrets(text, shapes=shape_names()) == find_secrets(text)


def test_restricted_contextual_shape_keeps_its_own_name() -> None:
    text = "GITHUB_TOKEN=ghp_" + _fill("FAKE0", 36)
    assert [f.shape for f in find_secrets(text)] == ["github_token"]
    assert [f.shape for f in find_secrets(text, shapes=["token_assignment"])] == [
        "token_assignment"
    ]


@pytest.mark.parametrize("shapes", [["github_token", "no_such_shape"], "bogus", {"Jwt"}])
def test_unknown_shape_name_raises(shapes: list[str] | str | set[str]) -> None:
    bad = ({shapes} if isinstance(shapes, str) else set(shapes)) - set(shape_names())
    for call in (find_secrets, contains_secret):
        with pytest.raises(ValueError) as excinfo:
            call("anything at all", shapes)
        message = str(excinfo.value)
        for name in bad:
            assert repr(name) in message
        assert "github_token" in message  # the valid names are listed


# --- properties ---------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [s.text for s in ALL_POSITIVE]
    + list(NEGATIVES)
    + [" ", "\n", "=", ":", '"', "'", "@", "/", "password", "TOKEN=", "[REDACTED:jwt]"]
)
_MIXED_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), _MIXED_TEXT))
def test_scanning_never_raises_and_findings_are_well_formed(text: str) -> None:
    findings = find_secrets(text)
    assert all(0 <= f.start < f.end <= len(text) for f in findings)
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    assert contains_secret(text) == bool(findings)
    assert _scanner_matches(text) == _reference_matches(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), _MIXED_TEXT))
def test_masking_is_idempotent_and_leaves_no_findings(text: str) -> None:
    masked, count = mask_secrets(text)
    assert find_secrets(masked) == []
    assert mask_secrets(masked) == (masked, 0)
    assert (count == 0) == (masked == text)


# --- the pre-filter: a fresh process compiles the scanner only for a text that may hold one ---


def _scanner_finds(text: str) -> bool:
    assert _all_shapes_scanner().detector is not None  # compiled: scans read the text in full
    return bool(find_secrets(text)) or contains_secret(text)


def test_every_shape_has_a_pre_filter_rule() -> None:
    ruled = set(_ANCHORS) | _HEX_RUN_SHAPES | _DOTTED_SHAPES
    assert ruled == set(shape_names())
    assert all(a == a.lower() and a for anchors in _ANCHORS.values() for a in anchors)


def test_no_latin1_character_folds_to_an_ascii_letter() -> None:
    # Why lowering a decoded base64 blob (Latin-1 text) keeps every case-insensitive match.
    letter = re2.compile("(?i)[a-z]")
    assert [hex(c) for c in range(0x80, 0x100) if letter.search(chr(c))] == []


@pytest.mark.parametrize("sample", ALL_POSITIVE, ids=_describe)
def test_every_sample_passes_the_pre_filter(sample: Sample) -> None:
    assert _may_contain(sample.text)
    for pad in ("", "x", "xy"):
        encoded = base64.b64encode(f"{pad} {sample.text} y".encode()).decode()
        if _scanner_finds(f"data {encoded} end"):  # found once decoded
            assert _may_contain(f"data {encoded} end")


_SHAPE_INDEX = st.integers(0, len(SECRET_SHAPES) - 1)


@settings(max_examples=400, deadline=None)
@given(_SHAPE_INDEX, st.data())
def test_text_matching_a_shape_passes_the_pre_filter(index: int, data: st.DataObject) -> None:
    # Python's re reads every shape's pattern alike (tested in test_every_pattern_...),
    # so hypothesis writes texts that each shape matches, with anything around them.
    shape = SECRET_SHAPES[index]
    text = data.draw(st.from_regex(shape.pattern), label=shape.name)
    assert _may_contain(text), shape.name
    encoded = f"blob {base64.b64encode(text.encode()).decode()} ."
    if _scanner_finds(encoded):
        assert _may_contain(encoded), shape.name


def _near_misses(draw: st.DrawFn) -> str:
    """A text one edit away from a match of some shape, or a sample: where a pre-filter
    that forgot a case would let a secret through."""
    if draw(st.booleans()):
        text = draw(st.from_regex(SECRET_SHAPES[draw(_SHAPE_INDEX)].pattern))
    else:
        text = draw(st.sampled_from(ALL_POSITIVE)).text
    if not text:
        return text
    at = draw(st.integers(0, len(text) - 1))
    edit = draw(st.sampled_from(["drop", "swap", "case"]))
    if edit == "drop":
        return text[:at] + text[at + 1 :]
    if edit == "case":
        return text[:at] + text[at].swapcase() + text[at + 1 :]
    return text[:at] + draw(st.sampled_from('aZ9_-.:=/+ ~"Q')) + text[at + 1 :]


_ASCII_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.text(), _ASCII_TEXT, _MIXED_TEXT, st.composite(_near_misses)()))
def test_a_text_the_pre_filter_rejects_holds_no_secret(text: str) -> None:
    if not _may_contain(text):
        assert not _scanner_finds(text), text
        encoded = base64.b64encode(text.encode()).decode()
        if not _may_contain(encoded):
            assert not _scanner_finds(encoded)


def test_a_fresh_process_compiles_the_scanner_only_for_a_candidate() -> None:
    import subprocess
    import sys

    script = (
        "from charter._policy import secrets as s\n"
        "quiet = s.contains_secret('ls -la src/module_12.py && git status')\n"
        "before = s._all_shapes_scanner().compiled\n"
        f"loud = s.contains_secret({SAMPLES[0].text!r})\n"
        "print(quiet, before, loud, s._all_shapes_scanner().compiled)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True", "True"]


def test_a_long_lived_process_compiles_the_scanner_after_a_few_dozen_texts() -> None:
    # Past the pre-filter's budget the compiled scanner is the cheaper one per text.
    import subprocess
    import sys

    script = (
        "from charter._policy import secrets as s\n"
        "seen = []\n"
        "for i in range(100):\n"
        "    assert not s.contains_secret(f'ls -la src/module_{i}.py')\n"
        "    seen.append(s._all_shapes_scanner().compiled)\n"
        "print(seen[0], seen[-1])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_a_process_scanning_long_texts_compiles_the_scanner_after_a_few() -> None:
    # An audit writer asks one joined text per batch: few calls, many characters each. The
    # pre-filter reads several times slower than the compiled scanner, so the budget counts
    # characters too.
    import subprocess
    import sys

    script = (
        "from charter._policy import secrets as s\n"
        "batch = '\\n'.join(f'ls -la src/module_{i}.py' for i in range(2000))\n"
        "seen = []\n"
        "for i in range(8):\n"
        "    assert not s.contains_secret(batch)\n"
        "    seen.append(s._all_shapes_scanner().compiled)\n"
        "print(len(batch) > 40_000, seen[0], seen[-1])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True"]


_ASCII_TEXT = st.lists(
    st.one_of(
        _PIECES,
        _PIECES.map(lambda t: base64.b64encode(t.encode("utf-8", "surrogatepass")).decode()),
        st.text(st.characters(max_codepoint=127), max_size=20),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_ASCII_TEXT)
@example("cGFzc3dvcmQ6IG51bGw=MLKEM768X25519PrivateKey = x.MLKEM768X25519PrivateKey")
def test_the_short_path_for_plain_ascii_text_answers_as_the_general_one(text: str) -> None:
    # Naming every shape takes the general path; no shapes takes the short one for ASCII.
    _all_shapes_scanner().search("warm")  # the short path needs the built detector
    every = tuple(shape_names())
    assert contains_secret(text) == contains_secret(text, shapes=every)
    # Never a miss. (Both paths may say yes where find_secrets finds nothing: they search
    # the base64 runs decoded and joined, so a secret can straddle two runs; masking then
    # finds nothing to replace.)
    if find_secrets(text):
        assert contains_secret(text)


# --- many texts at once (the writer asks this of each batch) --------------------------------

_ANY_TEXT = st.one_of(_ASCII_TEXT, _MIXED_TEXT, st.text(max_size=30))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ANY_TEXT, max_size=6))
def test_many_texts_are_never_said_clean_when_one_holds_a_secret(texts: list[str]) -> None:
    _all_shapes_scanner().search("warm")  # the one-scan path needs the built detector
    if any(contains_secret(t) for t in texts):
        assert contains_secret_in_any(texts)


@settings(max_examples=200, deadline=None)
@given(st.lists(_ANY_TEXT, min_size=1, max_size=6), st.data())
def test_what_is_said_of_many_texts_is_said_of_each_consecutive_run(
    texts: list[str], data: st.DataObject
) -> None:
    # The writer asks a whole batch first, and each record's own texts (consecutive in the
    # batch) only when the batch is not clean: a clean batch must mean every record is.
    _all_shapes_scanner().search("warm")
    start = data.draw(st.integers(0, len(texts) - 1))
    end = data.draw(st.integers(start, len(texts)))
    if contains_secret_in_any(texts[start:end]):
        assert contains_secret_in_any(texts)


@pytest.mark.parametrize("sample", ALL_POSITIVE, ids=_describe)
def test_every_sample_is_found_among_other_texts(sample: Sample) -> None:
    _all_shapes_scanner().search("warm")
    others = ["ls -la src", "exit_code", "a.py\nb.py\n", "Bash"]
    encoded = base64.b64encode(sample.text.encode("utf-8")).decode()
    assert contains_secret_in_any([*others, sample.text, *others])
    if contains_secret(encoded):
        assert contains_secret_in_any([*others, encoded, *others])


def test_clean_texts_are_said_clean_together() -> None:
    _all_shapes_scanner().search("warm")
    assert not contains_secret_in_any(list(NEGATIVES))
    assert not contains_secret_in_any([])


_RUN_TEXT = st.text(alphabet=st.sampled_from("aZ09+/-_= \n\t.:\"'é%\x00"), max_size=200)


@given(_RUN_TEXT)
@example("x" * 16)
@example("call_0b13f9abde5a " * 3)
@example("a" * 15 + " " + "b" * 40 + "=" + "c" * 16)
def test_the_base64_runs_read_are_the_long_words_of_the_text(text: str) -> None:
    # The runs decoded for the base64 check are found by substring searches; they must be
    # exactly the long words a split of the translated text gives.
    raw = text.encode("ascii", "replace")
    words = raw.translate(_B64_BYTES).split()
    assert _long_runs(raw) == [w for w in words if len(w) >= _MIN_RUN]
