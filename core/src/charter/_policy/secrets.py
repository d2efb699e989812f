"""The secret shapes Charter recognises, and the scanner built from them.

Two parts of Charter must agree on what a secret looks like: the ``no_secrets`` policy rule
(a string at a given field must not contain one) and the audit-trail redactor (secrets are
masked before anything is stored). If each kept its own patterns, a credential could be
blocked by one and written to disk by the other, so this module is the one place that
defines the shapes and scans for them.

Scanning uses RE2, so time is linear in the length of the text whatever the input: an agent
can hand us arbitrary strings and no pattern here can be made to backtrack. All shapes are
compiled into one alternation (a named group per shape, stripped for speed; see
``_Scanner``), so an ordinary scan is a single pass over the text.

What a finding covers:

* For token-like shapes (``ghp_...``, ``AKIA...``, JWTs, PEM blocks) the finding is the
  whole token.
* For shapes that need context to be recognised (``password = "..."``,
  ``Authorization: Bearer ...``, ``postgres://user:pass@host``, ...) the finding covers the
  *value only*, so masking keeps the context readable:
  ``password=[REDACTED:password_assignment]``.
* When such a value is itself a recognisable token (``GITHUB_TOKEN=ghp_...``) the finding
  is reported under the more specific shape (``github_token``), provided that shape was
  among those asked for.

Assignments (``password``/``secret``/``api_key``/``token`` keys) are where false positives
live, because code is full of ``login(password=password)``, ``if token == "lambda"`` and
``password: SecretStr``. A value counts only when it reads as data:

* it has at least 6 characters and does not start like a template or placeholder
  (``${...}``, ``{{...}}``, ``<...>``, ``%s``, ``***``), a path or a colour (``#fff``);
* it contains a digit or a symbol; unquoted, it must also end the word (``make_token(x)``
  is a call), and a digit is not enough if it has a dot (``ed25519.Ed25519PrivateKey``);
* unquoted after ``:``, a space must follow the colon (YAML, HTTP headers), which keeps
  ARNs such as ``...:secret:name`` out;
* in env-file form (UPPER_CASE key, ``=`` without spaces: ``DB_PASSWORD=...``) any value
  of 6 characters or more counts, digits and symbols or not;
* empty values, ``null``, ``None`` and ``~`` never count.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Collection, Sequence

from charter._policy.regex import re2_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "SECRET_SHAPES",
    "SecretFinding",
    "SecretShape",
    "contains_secret",
    "contains_secret_in_any",
    "find_secrets",
    "mask_secrets",
    "names_secret",
    "shape_names",
]


class _Frozen:
    """Immutable, compared, hashed and shown by its fields (`__slots__`, in order). A plain
    slotted class, not a dataclass: building one costs a fresh process (a Claude Code hook
    call) about a millisecond at import."""

    __slots__: tuple[str, ...] = ()
    _fields: tuple[str, ...] = ()

    def __init__(self, *values: Any) -> None:
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Frozen) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"


class SecretShape(_Frozen):
    """One kind of secret: a stable name, a one-sentence description and an RE2 pattern.

    Capturing groups in ``pattern`` (if any) mark the secret value inside its context; the
    first group that takes part in a match is what a finding covers. Without groups the
    whole match is the secret.
    """

    __slots__ = _fields = ("name", "description", "pattern")
    name: str
    description: str
    pattern: str

    def __init__(self, name: str, description: str, pattern: str) -> None:
        super().__init__(name, description, pattern)


class SecretFinding(_Frozen):
    """A secret found in a text: the shape's name and the ``text[start:end]`` it covers."""

    __slots__ = _fields = ("shape", "start", "end")
    shape: str
    start: int
    end: int

    def __init__(self, shape: str, start: int, end: int) -> None:
        super().__init__(shape, start, end)


# --- building blocks --------------------------------------------------------------------

# Assignment separators: `=`, `:`, Go's `:=`, Ruby/PHP `=>`, and `==` so hard-coded
# comparisons against a literal password are caught too.
_SEP = r"[ \t]*(?::=|=>|==|[:=])[ \t]*"
_MIN_VALUE = 6

# Digits and symbols. Real passwords and generated keys nearly always contain one; values
# without any (`next_token`, `self.password`, `session-token`, `keys/id_rsa`) are names,
# paths and labels, so generic assignments require one.
_SYMBOL = r"[0-9!#$%&*+=?@^~]"

# An unquoted value is one shell word: it stops at whitespace, quotes, shell
# metacharacters and brackets (which also keeps `?token=abc&page=2` from swallowing the
# rest of a URL)...
_UNQ = r"[^\s\"'`;&|<>(){}\[\]\\]"
# ...must not *start* like a template (`$X`, `%s`), a placeholder or a redaction marker
# (`***`, `[REDACTED:...]`), a path (`/`, `~`, `.`), a comment or a flag...
_UNQ_FIRST = r"[^\s\"'`;&|<>(){}\[\]\\$%*/~.#=:@!-]"
# ...and must end the word: `Ed25519PrivateKey.generate()` or `base64.b64decode(x)` is a
# call, not a value. The terminator is matched but is not part of the finding.
_UNQ_END = r"(?:[\s,;&|)}\]\"'`<>\\]|$)"
# Unquoted, a digit alone is not enough when there is a dot: `ed25519.Ed25519PrivateKey`
# and `self.token2` are attribute references. Such values need a symbol proper.
_UNQ_NO_DOT = r"[^\s\"'`;&|<>(){}\[\]\\.]"
_UNQ_SYMBOL = r"[!#$%*+=?@^~]"
_UNQ_FIRST_SYMBOL = r"[+?^]"

# Quoted values may hold spaces but not line breaks, and must not start like a template,
# placeholder, marker or path. The backslash is excluded so that escaped JSON
# (`{\"password\": \"...\"}`) ends the value at `\"`.
_QUOTED_FIRST = r"[^\s\"'`$%{<*\[\\/.~#]"
_QUOTED_FIRST_SYMBOL = r"[0-9!&+=?@^]"


def _with_symbol(first: str, first_symbol: str, rest: str, symbol: str) -> str:
    """Regex for ``first rest*``, at least ``_MIN_VALUE`` chars, containing a ``symbol``.

    RE2 has no lookahead, so "long enough AND has a symbol" is spelled out by where the
    first symbol sits: at position 0, at positions 1.._MIN_VALUE-2, or later. Every
    alternative ends greedily at the end of the run, so the value is always taken whole.
    """
    tail = _MIN_VALUE - 1
    alternatives = [f"{first_symbol}{rest}{{{tail},}}"]
    for before in range(tail - 1):
        prefix = f"{rest}{{{before}}}" if before else ""
        alternatives.append(f"{first}{prefix}{symbol}{rest}{{{tail - 1 - before},}}")
    alternatives.append(f"{first}{rest}{{{tail - 1},}}{symbol}{rest}*")
    return "(?:" + "|".join(alternatives) + ")"


def _quoted(quote: str, *, need_symbol: bool) -> str:
    body = rf"[^{quote}\r\n\\]"
    if need_symbol:
        value = _with_symbol(_QUOTED_FIRST, _QUOTED_FIRST_SYMBOL, body, _SYMBOL)
    else:
        value = f"{_QUOTED_FIRST}{body}{{{_MIN_VALUE - 1},}}"
    return rf"\\?{quote}({value})\\?{quote}"


def _assignment(keywords: str, upper_keywords: str) -> str:
    """A ``key <sep> value`` pattern where the key ends with one of ``keywords``.

    Two forms, each capturing only the value:

    * generic (case-insensitive; `key = "v"`, `"key": 'v'`, `key: v`, `--key v`): the
      value must contain a digit or symbol, since code is full of `password=password`.
      An unquoted value after `:` needs a space first, as in YAML and HTTP headers, which
      keeps ARNs (`arn:aws:secretsmanager:...:secret:name`) out;
    * env-file (`UPPER_KEY=v`, no spaces around `=` as in shell, so Python constants such
      as `ERRORTOKEN = token.ERRORTOKEN` stay out): any value of the minimum length.
    """
    quoted = f"{_quoted(chr(34), need_symbol=True)}|{_quoted(chr(39), need_symbol=True)}"
    unquoted = (
        f"({_with_symbol(_UNQ_FIRST, _UNQ_FIRST_SYMBOL, _UNQ, _UNQ_SYMBOL)}"
        f"|{_with_symbol(_UNQ_FIRST, '[0-9]', _UNQ_NO_DOT, '[0-9]')}){_UNQ_END}"
    )
    generic = (
        rf"(?i:[\w.-]*(?:{keywords}))(?:\\?[\"'])?"
        rf"(?:{_SEP}(?:{quoted})|[ \t]*(?:(?::=|=>|==|=)[ \t]*|:[ \t]+){unquoted})"
        rf"|(?i:--[\w-]*(?:{keywords}))[ \t]+(?:{quoted}|{unquoted})"
    )
    env = (
        rf"(?:{_quoted(chr(34), need_symbol=False)}|{_quoted(chr(39), need_symbol=False)}"
        rf"|({_UNQ_FIRST}{_UNQ}{{{_MIN_VALUE - 1},}}){_UNQ_END})"
    )
    return f"{generic}|[A-Z0-9_]*(?:{upper_keywords})={env}"


def _url_password(schemes: str) -> str:
    # userinfo may be empty (`redis://:pw@host`); the password may contain `:` and even an
    # unencoded `@` (greedy up to the last `@` before the path), but must not start like a
    # template or placeholder.
    return (
        rf"(?:{schemes})://[^\s:/?#@\"'<>\[\]]*:"
        r"([^\s:/?#@\"'<>\[\]{}$*][^\s/?#\"'<>\[\]]*)@"
    )


# Armored keys are matched line by line, never with an open-ended `[\s\S]*?...END`: a BEGIN
# line without its END would keep such a branch alive to the end of the text on every
# search, making scans quadratic. Key lines are base64 (full lines, a padded short line, a
# PGP checksum) or headers such as `Proc-Type: 4,ENCRYPTED`. At least one must follow the
# BEGIN line, so prose and code that merely mention it are not secrets. Line breaks may be
# real or JSON-escaped, and keys pasted on one line use spaces.
_KEY_LINE = (
    r"(?:=[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9+/]*={1,2}"
    r"|[A-Za-z][A-Za-z-]*:[ \t][^\r\n\\]*)"
)
_KEY_BREAK = r"(?:(?:[ \t]*(?:\r?\n|(?:\\r)?\\n))+[ \t]*|[ \t]+)"
# An unpadded last line can be short; it only counts right before the END line.
_KEY_SHORT_LINE = rf"(?:[A-Za-z0-9+/]{{1,15}}{_KEY_BREAK})?"


def _armored(begin: str, end: str) -> str:
    """``begin``, key lines, and ``end`` if present (truncated keys are still secrets)."""
    return (
        rf"{begin}{_KEY_BREAK}{_KEY_LINE}(?:{_KEY_BREAK}{_KEY_LINE})*"
        rf"(?:{_KEY_BREAK}{_KEY_SHORT_LINE}{end})?"
    )


def _pem(label: str) -> str:
    return _armored(f"-----BEGIN {label}-----", f"-----END {label}-----")


_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

# Order matters only where two shapes can match at the same position: RE2 then prefers
# the earlier alternative, so specific shapes precede the generic ones they overlap.
SECRET_SHAPES: tuple[SecretShape, ...] = (
    SecretShape(
        "ssh_private_key",
        "An OpenSSH, SSH2 or PuTTY private key file.",
        _pem("OPENSSH PRIVATE KEY")
        + "|"
        + _armored(
            "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----", "---- END SSH2 ENCRYPTED PRIVATE KEY ----"
        )
        # PuTTY: header and public-key lines, then the private lines.
        + r"|PuTTY-User-Key-File-[0-9]+:[^\r\n]*"
        + r"(?:\r?\n(?:[A-Za-z][A-Za-z-]*:[^\r\n]*|[A-Za-z0-9+/=]+))*?"
        + r"\r?\nPrivate-Lines:[ \t]*[0-9]+(?:\r?\n[A-Za-z0-9+/=]+)+",
    ),
    SecretShape(
        "private_key_block",
        "A PEM private key block (RSA, EC, DSA, PKCS#8, encrypted or PGP).",
        _pem(r"[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?"),
    ),
    SecretShape(
        "gcp_private_key_id",
        "The private_key_id of a Google Cloud service-account JSON key.",
        r"\"private_key_id\\?\"[ \t]*:[ \t]*\\?\"([0-9a-f]{40})\\?\"",
    ),
    SecretShape(
        "aws_access_key_id",
        "An AWS access key id (long-term AKIA or temporary ASIA).",
        r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
    ),
    SecretShape(
        "aws_secret_access_key",
        "An AWS secret access key assigned to an aws_secret_access_key-like key.",
        r"(?i:[\w.-]*(?:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)"
        rf"(?:\\?[\"'])?{_SEP}(?:\\?[\"'])?)([A-Za-z0-9/+]{{40,}})",
    ),
    SecretShape(
        "google_api_key",
        "A Google Cloud / Firebase API key (AIza...).",
        r"\bAIza[0-9A-Za-z_-]{35}",
    ),
    SecretShape(
        "google_oauth_client_secret",
        "A Google OAuth client secret (GOCSPX-...).",
        r"\bGOCSPX-[A-Za-z0-9_-]{28}",
    ),
    SecretShape(
        "google_oauth_access_token",
        "A Google OAuth 2.0 access token (ya29....).",
        r"\bya29\.[0-9A-Za-z_-]{30,}",
    ),
    SecretShape(
        "azure_storage_key",
        "An Azure storage or Service Bus key in a connection string (AccountKey=...).",
        r"(?i:\b(?:AccountKey|SharedAccessKey|SharedSecret)[ \t]*=[ \t]*)"
        r"([A-Za-z0-9+/]{20,}={0,2})",
    ),
    SecretShape(
        "azure_sas_signature",
        "The signature of an Azure shared access signature URL (sig=...).",
        r"[?&]sig=([A-Za-z0-9%+/=]{40,})",
    ),
    SecretShape(
        "azure_ad_client_secret",
        "A Microsoft Entra ID (Azure AD) application client secret (...8Q~...).",
        # As gitleaks spells it: three characters, a digit, `Q~`, then 31 to 34 more.
        r"(?:^|[\\'\"`\s>=:(,)])([A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34})"
        r"(?:$|[\\'\"`\s<),])",
    ),
    SecretShape(
        "github_token",
        "A GitHub personal, OAuth, app or refresh token (ghp_, gho_, ghs_, github_pat_...).",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})",
    ),
    SecretShape(
        "gitlab_token",
        "A GitLab personal, deploy, runner or other access token (glpat-...).",
        r"\b(?:(?:glpat|gldt|glrt|glptt|glcbt|glft|glimt|glsoat|gloas)-[A-Za-z0-9_-]{20,}"
        r"|GR1348941[A-Za-z0-9_-]{20,})",
    ),
    SecretShape(
        "slack_token",
        "A Slack bot, user, app or configuration token (xoxb-, xoxp-, xapp-...).",
        r"\b(?:xox[abeoprs]-[0-9A-Za-z-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,})",
    ),
    SecretShape(
        "slack_webhook_url",
        "The secret path of a Slack incoming-webhook URL.",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/+-]{20,})",
    ),
    SecretShape(
        "discord_webhook_url",
        "The secret token of a Discord webhook URL.",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]+/([A-Za-z0-9_-]{60,})",
    ),
    SecretShape(
        "stripe_key",
        "A Stripe secret or restricted API key (sk_live_, rk_live_, sk_test_...).",
        r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
    ),
    SecretShape(
        "stripe_webhook_secret",
        "A Stripe webhook signing secret (whsec_...).",
        r"\bwhsec_[A-Za-z0-9+/=]{24,}",
    ),
    SecretShape(
        "anthropic_api_key",
        "An Anthropic API or admin key (sk-ant-...).",
        r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    ),
    SecretShape(
        "openai_api_key",
        "An OpenAI API key (sk-..., sk-proj-..., sk-svcacct-...).",
        r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{32,})",
    ),
    SecretShape(
        "groq_api_key",
        "A Groq API key (gsk_...).",
        r"\bgsk_[A-Za-z0-9]{48,}",
    ),
    SecretShape(
        "xai_api_key",
        "An xAI API key (xai-...).",
        r"\bxai-[A-Za-z0-9]{70,}",
    ),
    SecretShape(
        "perplexity_api_key",
        "A Perplexity API key (pplx-...).",
        r"\bpplx-[A-Za-z0-9]{40,}",
    ),
    SecretShape(
        "replicate_api_token",
        "A Replicate API token (r8_...).",
        r"\br8_[A-Za-z0-9]{37}\b",
    ),
    SecretShape(
        "huggingface_token",
        "A Hugging Face access token (hf_...).",
        r"\bhf_[A-Za-z0-9]{30,}",
    ),
    SecretShape(
        "npm_token",
        "An npm access token (npm_...).",
        r"\bnpm_[A-Za-z0-9]{36}\b",
    ),
    SecretShape(
        "npmrc_auth_token",
        "An auth token or password in an .npmrc file (_authToken=..., _auth=..., _password=...).",
        r"\b_(?:authToken|auth|password)[ \t]*=[ \t]*[\"']?"
        r"([^\s\"'$\[\]{}<>*][^\s\"'\[\]{}<>]{5,})",
    ),
    SecretShape(
        "pypi_token",
        "A PyPI or TestPyPI API token (pypi-AgE...).",
        r"\bpypi-AgE[A-Za-z0-9_-]{50,}",
    ),
    SecretShape(
        "twilio_key",
        "A Twilio API key (SK...) or account SID (AC...).",
        r"\b(?:AC|SK)[0-9a-f]{32}\b",
    ),
    SecretShape(
        "sendgrid_api_key",
        "A SendGrid API key (SG.x.y).",
        r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,}",
    ),
    SecretShape(
        "mailgun_api_key",
        "A Mailgun private API key (key-...).",
        r"\bkey-[0-9a-f]{32}\b",
    ),
    SecretShape(
        "mailchimp_api_key",
        "A Mailchimp API key (32 hex digits and a -usN datacenter suffix).",
        r"\b[0-9a-f]{32}-us[0-9]{1,2}\b",
    ),
    SecretShape(
        "discord_bot_token",
        "A Discord bot token (three dot-separated base64url segments).",
        r"\b[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
    ),
    SecretShape(
        "telegram_bot_token",
        "A Telegram bot token (bot id, a colon and AA...).",
        r"(?:\b|bot)([0-9]{8,10}:AA[A-Za-z0-9_-]{33})",
    ),
    SecretShape(
        "shopify_token",
        "A Shopify access token or shared secret (shpat_, shpca_, shppa_, shpss_).",
        r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",
    ),
    SecretShape(
        "square_token",
        "A Square access token or OAuth secret (EAAA..., sq0atp-, sq0csp-).",
        r"\b(?:EAAA[A-Za-z0-9_-]{60}|sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43})",
    ),
    SecretShape(
        "digitalocean_token",
        "A DigitalOcean personal access, OAuth or refresh token (dop_v1_...).",
        r"\bdo[opr]_v1_[a-f0-9]{64}\b",
    ),
    SecretShape(
        "heroku_api_key",
        "A Heroku API key: HRKU-... or a UUID assigned to a heroku key or token.",
        r"(?i:[\w.-]*heroku[\w.-]*(?:key|token|secret)(?:\\?[\"'])?"
        rf"{_SEP}(?:\\?[\"'])?)({_UUID})\b|\bHRKU-[A-Za-z0-9_-]{{20,}}",
    ),
    SecretShape(
        "databricks_token",
        "A Databricks personal access token (dapi...).",
        r"\bdapi[0-9a-f]{32}(?:-[0-9]+)?\b",
    ),
    SecretShape(
        "atlassian_api_token",
        "An Atlassian (Jira, Confluence) API token (ATATT3...).",
        r"\bAT(?:ATT|CTT)3[A-Za-z0-9_=-]{100,}",
    ),
    SecretShape(
        "hashicorp_vault_token",
        "A HashiCorp Vault service, batch or recovery token (hvs., hvb., hvr.).",
        r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}",
    ),
    SecretShape(
        "terraform_cloud_token",
        "A Terraform Cloud / Enterprise API token (....atlasv1....).",
        r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}",
    ),
    SecretShape(
        "postman_api_key",
        "A Postman API key (PMAK-...).",
        r"\bPMAK-[0-9a-f]{24}-[0-9a-f]{34}\b",
    ),
    SecretShape(
        "age_secret_key",
        "An age encryption secret key (AGE-SECRET-KEY-1...).",
        r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b",
    ),
    SecretShape(
        "grafana_token",
        "A Grafana service-account or Grafana Cloud token (glsa_, glc_).",
        r"\b(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
    ),
    SecretShape(
        "newrelic_api_key",
        "A New Relic user API key (NRAK-...).",
        r"\bNRAK-[A-Z0-9]{27}\b",
    ),
    SecretShape(
        "sentry_auth_token",
        "A Sentry organisation or user auth token (sntrys_, sntryu_).",
        r"\bsntr[yu]s_[A-Za-z0-9+/=_-]{40,}",
    ),
    SecretShape(
        "linear_api_key",
        "A Linear API key (lin_api_...).",
        r"\blin_api_[A-Za-z0-9]{40}\b",
    ),
    SecretShape(
        "doppler_token",
        "A Doppler personal, service or service-account token (dp.pt., dp.st., ...).",
        r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}",
    ),
    SecretShape(
        "mapbox_secret_token",
        "A Mapbox secret access token (sk.eyJ...).",
        r"\bsk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",
    ),
    SecretShape(
        "notion_token",
        "A Notion integration token (secret_..., ntn_...).",
        r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{46})\b",
    ),
    SecretShape(
        "airtable_token",
        "An Airtable personal access token (pat....).",
        r"\bpat[A-Za-z0-9]{14}\.[a-f0-9]{64}\b",
    ),
    SecretShape(
        "supabase_token",
        "A Supabase personal access token (sbp_...).",
        r"\bsbp_[a-f0-9]{40}\b",
    ),
    SecretShape(
        "pulumi_token",
        "A Pulumi access token (pul-...).",
        r"\bpul-[a-f0-9]{40}\b",
    ),
    SecretShape(
        "onepassword_service_token",
        "A 1Password service-account token (ops_eyJ...).",
        r"\bops_eyJ[A-Za-z0-9+/=_-]{100,}",
    ),
    SecretShape(
        "jwt",
        "A JSON Web Token: three base64url segments, header and payload starting eyJ.",
        r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}",
    ),
    SecretShape(
        "bearer_token",
        "A bearer token in an Authorization header.",
        r"(?i:\b(?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
        r"(?:bearer|token)[ \t]+)([A-Za-z0-9._~+/-]{16,}=*)",
    ),
    SecretShape(
        "basic_auth_header",
        "Base64 user:password credentials in an Authorization: Basic header.",
        r"(?i:\b(?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
        r"basic[ \t]+)([A-Za-z0-9+/]{8,}={0,2})",
    ),
    # The two command-line shapes below look at most 200 characters past the command name:
    # an unbounded gap would keep a branch alive to the end of a long line on every search.
    SecretShape(
        "curl_user_password",
        "The password in a curl -u / --user user:password option.",
        r"\bcurl\b[^\r\n|;&]{0,200}?[ \t](?:-u[ \t]*|--user[ \t=]+)[\"']?[^\s:\"']*:"
        r"([^\s\"'$*<\[][^\s\"']*)",
    ),
    SecretShape(
        "mysql_cli_password",
        "The password in a mysql/mysqldump -pPASSWORD command-line option.",
        r"\bmysql(?:dump|admin|sh)?\b[^\r\n|;&]{0,200}?[ \t]-p([^\s\"'$*<\[-][^\s\"']*)",
    ),
    SecretShape(
        "database_connection_string",
        "The password in a database connection URL (postgres://user:password@host).",
        _url_password(
            r"(?i:\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql"
            r"|sqlserver|oracle|cockroachdb|clickhouse|couchdb|neo4j(?:\+s)?|bolt|snowflake"
            r"|db2)(?:\+[a-z0-9]+)?)"
        ),
    ),
    SecretShape(
        "url_credentials",
        "The password in a URL's user:password@ part (basic-auth credentials).",
        _url_password(r"\b[A-Za-z][A-Za-z0-9+.-]*"),
    ),
    SecretShape(
        "password_assignment",
        "A value assigned to a password-like key (password, passwd, passphrase, pwd, *_pass).",
        _assignment(
            r"passw(?:or)?d|passphrase|passcode|pwd|[_.-]pass",
            r"PASSW(?:OR)?D|PASSPHRASE|PASSCODE|PWD|_PASS",
        ),
    ),
    SecretShape(
        "secret_assignment",
        "A value assigned to a secret-like key (secret, client_secret, private_key, ...).",
        _assignment(
            r"secret(?:[_-]?key)?|(?:private|signing|encryption|decryption|master)[_-]?key",
            r"SECRET(?:_?KEY)?|(?:PRIVATE|SIGNING|ENCRYPTION|DECRYPTION|MASTER)_?KEY",
        ),
    ),
    SecretShape(
        "api_key_assignment",
        "A value assigned to an API-key-like key (api_key, apikey, access_key, x-api-key, ...).",
        _assignment(
            r"api[_-]?key|access[_-]?key|app[_-]?key|auth[_-]?key|subscription[_-]?key",
            r"API_?KEY|ACCESS_?KEY|APP_?KEY|AUTH_?KEY|SUBSCRIPTION_?KEY",
        ),
    ),
    SecretShape(
        "token_assignment",
        "A value assigned to a token-like key (token, access_token, auth_token, ...).",
        _assignment(r"token", r"TOKEN"),
    ),
)

# Shapes recognised by their context rather than by the value itself: when their value is
# a recognisable token, the finding is reported under that token's own shape instead.
_CONTEXTUAL: frozenset[str] = frozenset(
    {
        "bearer_token",
        "basic_auth_header",
        "curl_user_password",
        "mysql_cli_password",
        "database_connection_string",
        "url_credentials",
        "npmrc_auth_token",
        "password_assignment",
        "secret_assignment",
        "api_key_assignment",
        "token_assignment",
    }
)

# No shape can match fewer characters than this (the shortest is a URL like `ab://:x@`),
# so shorter strings skip the regex engine altogether.
_MIN_SECRET_LEN = 8

# mask_secrets repeats until nothing is found, so its output is a fixed point. A finding
# always consumes at least one original character, so this bound is never reached in
# practice; it only guards against a pattern bug turning into an endless loop.
_MAX_MASK_PASSES = 8

_SHAPE_NAMES: tuple[str, ...] = tuple(shape.name for shape in SECRET_SHAPES)
_SHAPE_SET: frozenset[str] = frozenset(_SHAPE_NAMES)
_SHAPES_BY_NAME: dict[str, SecretShape] = {shape.name: shape for shape in SECRET_SHAPES}


def _combined(names: tuple[str, ...]) -> str:
    """One alternation of the named shapes, a named group each, in priority order."""
    return "|".join(f"(?P<{name}>{_SHAPES_BY_NAME[name].pattern})" for name in names)


def _without_captures(pattern: str) -> str:
    """``pattern`` with every group, named or not, made non-capturing."""
    out: list[str] = []
    escaped = in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        out.append(char)
        i += 1
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(" and pattern.startswith("?P<", i):
            i = pattern.index(">", i) + 1
            out.append("?:")
        elif char == "(" and not pattern.startswith("?", i):
            out.append("?:")
    return "".join(out)


def _options() -> Any:
    import re2  # deferred: keeps `import charter` free of the RE2 extension

    options = re2.Options()
    # Big alternations want more than RE2's 8 MiB default once the DFA has cached states
    # for varied input; running out would drop scanning to the much slower NFA.
    options.max_mem = 64 << 20
    return options


@functools.cache
def _shape_regex(name: str) -> Any:
    import re2

    return re2.compile(_SHAPES_BY_NAME[name].pattern, _options())


class _Scanner:
    """Scans for a set of shapes.

    Finding *where* secrets are and finding *which* shape and value group each one is are
    separate steps, because RE2 is only fast at the first. A regex with capturing groups
    makes RE2 run its slow submatch engine over the whole combined program on every match
    (tens of microseconds), and the binding returns a span per group on every call, hit or
    miss. So the text is scanned with the combined alternation stripped of all groups (one
    DFA pass), and each hit is then attributed to its shape by an RE2 Set (also a DFA) and
    that shape's own small regex.
    """

    __slots__ = ("_detector", "_names", "_search")

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self._detector: Any = None
        self._search: Any = None

    @property
    def compiled(self) -> bool:
        """Whether the detector is built; until it is, scans ask `_may_contain` first."""
        return self._detector is not None

    @property
    def detector(self) -> Any:
        """The combined alternation, compiled on first use (the expensive part of a scan
        in a fresh process)."""
        if self._detector is None:
            import re2

            self._detector = re2.compile(_without_captures(_combined(self._names)), _options())
        return self._detector

    def search(self, text: str) -> bool:
        """Whether the detector matches anywhere in `text` (which must encode as UTF-8).

        Called on every text redaction or a policy scans: the binding's own ``search``
        builds a match object and character offsets, which costs more than the scan.
        """
        if self._search is None:
            from charter._policy.regex import search_function

            self._search = search_function(self.detector)
        return bool(self._search(text))

    def _identify(self, text: str, start: int, end: int) -> tuple[str, Any, int]:
        """The shape whose alternative the detector matched at ``text[start:end]``.

        Returns the shape's name, its own match (on a window of ``text``) and the offset of
        that window in ``text``.

        RE2 takes the first alternative that matches at a position at all, so this is the
        lowest-indexed shape matching exactly this span, judged in context (word
        boundaries, end of text). The Set judges the span alone, which can only add
        candidates (every word-boundary assertion here sits next to a word character),
        never lose the right one; still, the loop falls back to every shape, so a future
        pattern breaking that rule costs time, not correctness.
        """
        found = _candidate_set(self._names).Match(text[start:end]) or []
        # One character either side is all the context RE2's assertions look at. Passing
        # the whole text instead would make the binding re-encode it on every call, which
        # turns many findings in a long text quadratic.
        left = max(start - 1, 0)
        window = text[left : end + 1]
        for index in [*sorted(found), *range(len(self._names))]:
            name = self._names[index]
            match = _shape_regex(name).fullmatch(window, start - left, end - left)
            if match is not None:
                return name, match, left
        raise AssertionError(f"no shape matches the detected span {text[start:end]!r}")

    def _finding(self, text: str, start: int, end: int, offset: int) -> SecretFinding:
        name, match, left = self._identify(text, start, end)
        for group in range(1, int(match.re.groups) + 1):
            group_start = int(match.start(group))
            if group_start != -1:
                start, end = left + group_start, left + int(match.end(group))
                break
        refiner = _refiner(self._names) if name in _CONTEXTUAL else None
        if refiner is not None:
            # The value is judged on its own, so the context around it doesn't matter.
            value = text[start:end]
            if refiner.detector.fullmatch(value) is not None:
                return refiner._finding(value, 0, len(value), offset + start)
        return SecretFinding(name, start + offset, end + offset)

    def findall(self, text: str) -> list[SecretFinding]:
        return [
            self._finding(text, int(match.start()), int(match.end()), 0)
            for match in self.detector.finditer(text)
        ]


# Built on first use, and the two helpers below only once a secret is found: compiling
# the alternation is the expensive part of the first scan.
@functools.cache
def _scanner(names: tuple[str, ...]) -> _Scanner:
    return _Scanner(names)


@functools.cache
def _candidate_set(names: tuple[str, ...]) -> Any:
    import re2

    candidates = re2.Set.FullMatchSet(_options())
    for name in names:
        candidates.Add(_without_captures(_SHAPES_BY_NAME[name].pattern))
    candidates.Compile()
    return candidates


@functools.cache
def _refiner(names: tuple[str, ...]) -> _Scanner | None:
    """The scanner that re-reads a contextual shape's value as a specific token."""
    specific = tuple(name for name in names if name not in _CONTEXTUAL)
    return _scanner(specific) if specific and len(specific) < len(names) else None


@functools.cache
def _all_shapes_scanner() -> _Scanner:
    # Its own cache entry: hashing the 60-odd names on every call would cost more than
    # the scan of a short string.
    return _scanner(_SHAPE_NAMES)


def _select(shapes: Collection[str] | None) -> _Scanner | None:
    """The scanner for ``shapes`` (None = all), or None when no shape was asked for."""
    if shapes is None:
        return _all_shapes_scanner()
    # A bare string is a Collection[str] of characters; read it as one shape name.
    if isinstance(shapes, str):
        shapes = (shapes,)
    return _select_names(shapes if isinstance(shapes, (tuple, frozenset)) else tuple(shapes))


@functools.cache
def _select_names(shapes: tuple[str, ...] | frozenset[str]) -> _Scanner | None:
    # Cached per distinct argument: a policy rule passes the same shapes on every call.
    wanted = frozenset(shapes)
    unknown = sorted(wanted - _SHAPE_SET)
    if unknown:
        raise ValueError(
            f"unknown secret shape(s): {', '.join(map(repr, unknown))}; "
            f"valid shapes are: {', '.join(_SHAPE_NAMES)}"
        )
    if not wanted:
        return None
    if len(wanted) == len(_SHAPE_NAMES):
        return _all_shapes_scanner()
    # Keep the global order: it decides which shape wins when two match at one position.
    return _scanner(tuple(name for name in _SHAPE_NAMES if name in wanted))


# Characters that render as nothing: one inside a token hides it from every shape.
_INVISIBLE_CHARS = "\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff"
_INVISIBLE = dict.fromkeys(map(ord, _INVISIBLE_CHARS))
# A word holding a percent-escape or an invisible character, and a run of base64 (standard
# or URL-safe) long enough to wrap the shortest secret.
_ENCODED_WORD = (
    r"\S*(?:%[0-9A-Fa-f]{2}|[\x{00ad}\x{180e}\x{200b}-\x{200d}\x{2060}-\x{2064}\x{feff}])\S*"
)
_BASE64_RUN = r"[A-Za-z0-9+/_-]{16,}={0,2}"


@functools.cache
def _helper_regex(pattern: str) -> Any:
    import re2

    return re2.compile(pattern, _options())


def _decoded_base64(run: str) -> str:
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    if len(body) % 4 == 1:
        body = body[:-1]
    try:
        # base64.b64decode's own decoder (non-strict), without importing base64 (and re).
        raw = binascii.a2b_base64(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return ""
    # Latin-1 keeps every byte: a token inside binary data is still found.
    return raw.decode("latin-1")


# Bytes of a base64 run (URL-safe letters read as the standard ones); everything else is
# a space, so `bytes.split` cuts the runs out in C.
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_BYTES = bytes(
    c if c in _B64_ALPHABET else {ord("-"): ord("+"), ord("_"): ord("/")}.get(c, 0x20)
    for c in range(256)
)


# Joins the runs: decodes to three line feeds, which no shape's token crosses (zero bytes
# would let a value run on from one decoded run into the next).
_RUN_JOIN = b"CgoK"


# Each byte as "a" when `_B64_BYTES` reads it as a base64 letter, else as a space: in this
# mask of a text, a run long enough to be read is found by one substring search.
_B64_MASK = bytes(0x20 if c == 0x20 else 0x61 for c in _B64_BYTES)
_MIN_RUN = 16
_LONG_RUN = b"a" * _MIN_RUN


def _long_runs(raw: bytes) -> list[bytes]:
    """The base64 runs of `raw` at least `_MIN_RUN` long, in order, as `_B64_BYTES` reads
    them: ``[r for r in raw.translate(_B64_BYTES).split() if len(r) >= _MIN_RUN]``.

    Found by substring searches in the mask of `raw`: a batch of records' text splits into
    a thousand words, nearly all too short, and making an object of each cost more than
    the secret scan itself."""
    mask = raw.translate(_B64_MASK)
    runs = []
    start = mask.find(_LONG_RUN)
    while start >= 0:
        end = mask.find(b" ", start + _MIN_RUN)
        if end < 0:
            end = len(mask)
        runs.append(raw[start:end].translate(_B64_BYTES))
        start = mask.find(_LONG_RUN, end)
    return runs


def _base64_blob(text: str) -> str:
    """Every base64 run of `text` decoded, in one C call, as Latin-1 text: runs are padded
    to whole quanta with ``A`` and joined by `_RUN_JOIN` (three line feeds between them)."""
    runs = [
        r + b"A" * (-len(r) % 4)
        for r in _long_runs(re2_text(text).encode("ascii", "replace"))
        if not r.isalpha() and not r.isdigit() and len(r) % 4 != 1
    ]
    if not runs:
        return ""
    return binascii.a2b_base64(_RUN_JOIN.join(runs)).decode("latin-1")


def _may_hide(text: str, scanner: _Scanner) -> tuple[bool, bool]:
    """Whether a secret may hide in `text` (percent-escaped or with invisible characters, in
    base64): cheap whole-text checks, which can only add candidates, never miss one."""
    hidden_plain = False
    if "%" in text or not text.isascii():
        whole = _plain(text)
        hidden_plain = whole != text and scanner.search(re2_text(whole))
    blob = _base64_blob(text)
    hidden_b64 = bool(blob) and scanner.search(blob)
    return hidden_plain, hidden_b64


def _encoded(text: str, scanner: _Scanner) -> list[SecretFinding]:
    """Secrets that only appear once `text` is decoded: a word with invisible characters
    or percent-escapes in it, a base64 run. A finding covers the encoded word or run and is
    named after the decoded secret's shape. One level of encoding is undone."""
    hidden_plain, hidden_b64 = _may_hide(text, scanner)
    spans: list[tuple[int, int]] = []
    plains: list[str] = []
    if hidden_plain:
        for m in _helper_regex(_ENCODED_WORD).finditer(text):
            word = m.group(0)
            plain = _plain(word)
            if plain != word and len(plain) >= _MIN_SECRET_LEN:
                spans.append((m.start(), m.end()))
                plains.append(plain)
    if hidden_b64:
        for m in _helper_regex(_BASE64_RUN).finditer(text):
            plain = _decoded_base64(m.group(0))
            if len(plain) >= _MIN_SECRET_LEN:
                spans.append((m.start(), m.end()))
                plains.append(plain)
    found: list[SecretFinding] = []
    for (start, end), plain in zip(spans, plains, strict=True):
        hits = scanner.findall(re2_text(plain))
        if hits:
            found.append(SecretFinding(hits[0].shape, start, end))
    return found


def _plain(text: str) -> str:
    """`text` without invisible characters and with percent-escapes decoded (no regex:
    ``unquote_to_bytes`` splits on ``%``)."""
    text = text.translate(_INVISIBLE)
    if "%" not in text:
        return text
    from urllib.parse import unquote_to_bytes  # only %-encoded text needs it

    return unquote_to_bytes(re2_text(text)).decode("utf-8", "replace")


def _merge(literal: list[SecretFinding], encoded: list[SecretFinding]) -> list[SecretFinding]:
    """Literal findings, plus encoded ones that overlap none of them, ordered by start."""
    out = list(literal)
    for f in encoded:
        if not any(f.start < g.end and g.start < f.end for g in out):
            out.append(f)
    out.sort(key=lambda f: f.start)
    return out


# --- the pre-filter ------------------------------------------------------------------------
#
# Compiling the scanner costs a fresh process (a Claude Code hook call) tens of milliseconds,
# and most texts hold no secret. So until a scanner is compiled, a text is first read by
# `_may_contain`, a necessary condition of every shape made of substring tests and
# character runs (C loops, linear in the text): when it is false, no shape can match the
# text, nor the text decoded, and the scanner is never built. Every shape lists below what
# any match of it must contain (lower case: the text is lowered first, which keeps every
# case-insensitive match and every case-sensitive one). `core/tests/test_secrets.py` checks
# this against text generated from each shape's own pattern and against every sample.

# Each entry: the substrings of which a match of that shape contains at least one.
_ANCHORS: dict[str, tuple[str, ...]] = {
    "ssh_private_key": ("private key", "putty-user-key-file-"),
    "private_key_block": ("private key",),
    "gcp_private_key_id": ("private_key_id",),
    "aws_access_key_id": ("akia", "asia", "abia", "acca", "a3t"),
    "aws_secret_access_key": ("secret",),
    "google_api_key": ("aiza",),
    "google_oauth_client_secret": ("gocspx-",),
    "google_oauth_access_token": ("ya29.",),
    "azure_storage_key": ("accountkey", "sharedaccesskey", "sharedsecret"),
    "azure_sas_signature": ("sig=",),
    "azure_ad_client_secret": ("q~",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": (
        *(f"{p}-" for p in ("glpat", "gldt", "glrt", "glptt", "glcbt", "glft", "glimt")),
        "glsoat-",
        "gloas-",
        "gr1348941",
    ),
    "slack_token": ("xox", "xapp-"),
    "slack_webhook_url": ("hooks.slack.com/",),
    "discord_webhook_url": ("/api/webhooks/",),
    "stripe_key": ("k_live_", "k_test_"),
    "stripe_webhook_secret": ("whsec_",),
    "anthropic_api_key": ("sk-ant-",),
    "openai_api_key": ("sk-",),
    "groq_api_key": ("gsk_",),
    "xai_api_key": ("xai-",),
    "perplexity_api_key": ("pplx-",),
    "replicate_api_token": ("r8_",),
    "huggingface_token": ("hf_",),
    "npm_token": ("npm_",),
    "npmrc_auth_token": ("_auth", "_password"),
    "pypi_token": ("pypi-age",),
    "sendgrid_api_key": ("sg.",),
    "mailgun_api_key": ("key-",),
    "telegram_bot_token": (":aa",),
    "shopify_token": ("shpat_", "shpca_", "shppa_", "shpss_"),
    "square_token": ("eaaa", "sq0atp-", "sq0csp-"),
    "digitalocean_token": ("_v1_",),
    "heroku_api_key": ("heroku", "hrku-"),
    "databricks_token": ("dapi",),
    "atlassian_api_token": ("atatt3", "atctt3"),
    "hashicorp_vault_token": ("hvs.", "hvb.", "hvr."),
    "terraform_cloud_token": (".atlasv1.",),
    "postman_api_key": ("pmak-",),
    "age_secret_key": ("age-secret-key-1",),
    "grafana_token": ("glsa_", "glc_"),
    "newrelic_api_key": ("nrak-",),
    "sentry_auth_token": ("sntrys_", "sntrus_"),
    "linear_api_key": ("lin_api_",),
    "doppler_token": ("dp.",),
    "mapbox_secret_token": ("sk.eyj",),
    "notion_token": ("secret_", "ntn_"),
    "supabase_token": ("sbp_",),
    "pulumi_token": ("pul-",),
    "onepassword_service_token": ("ops_eyj",),
    "jwt": ("eyj",),
    "bearer_token": ("authorization",),
    "basic_auth_header": ("authorization",),
    "curl_user_password": ("curl",),
    "mysql_cli_password": ("mysql",),
    "database_connection_string": ("://",),
    "url_credentials": ("://",),
    "password_assignment": ("pass", "pwd"),
    "secret_assignment": (
        "secret",
        *(
            f"{word}{sep}key"
            for word in ("private", "signing", "encryption", "decryption", "master")
            for sep in ("", "_", "-")
        ),
    ),
    "api_key_assignment": tuple(
        f"{word}{sep}key"
        for word in ("api", "access", "app", "auth", "subscription")
        for sep in ("", "_", "-")
    ),
    "token_assignment": ("token",),
}
# Shapes with no literal of their own, read by the runs of characters they need instead:
# 32 hex digits (Twilio, Mailchimp, Airtable's 64), or three dot-separated base64url
# segments of at least 24, exactly 6 and at least 27 characters (a Discord bot token).
_HEX_RUN_SHAPES = frozenset({"twilio_key", "mailchimp_api_key", "airtable_token"})
_DOTTED_SHAPES = frozenset({"discord_bot_token"})
_HEX_RUN = 32
_ALL_ANCHORS: tuple[bytes, ...] = tuple(
    dict.fromkeys(a.encode("ascii") for v in _ANCHORS.values() for a in v)
)
# bytes.translate tables (a C loop): the run's characters kept, every other byte a space.
_HEX_ONLY = bytes(c if chr(c) in "0123456789abcdef" else 0x20 for c in range(256))
_DOTTED_ONLY = bytes(
    c if chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789_-." else 0x20 for c in range(256)
)
# Past this length the pre-filter is skipped: scanning a long text costs more than
# compiling the scanner, and a long text would pay both on a hit.
_PREFILTER_MAX = 1 << 16
# A process that scans this many texts, or this many characters, is long-lived (an agent, a
# server, an audit writer), for which the compiled scanner is the cheaper one: from then on
# the scanner is compiled and used directly. The compiled scanner costs about 30 ms once and
# reads about 12 us/KB, about a microsecond per short text; the pre-filter reads about
# 90 us/KB, tens of microseconds per short text, so 256 KB pre-filtered cost about what
# compiling does. A hook process scans a handful of short texts (the redactor asks a batch's
# texts joined, as one) and never gets there; a writer's joined batches of hundreds of
# records reach the character budget within a few batches.
_PREFILTER_CALLS = 32
_PREFILTER_CHARS = 1 << 18
_prefiltered = [0, 0]  # calls, characters


def _has_hex_run(lowered: bytes) -> bool:
    return any(len(word) >= _HEX_RUN for word in lowered.translate(_HEX_ONLY).split())


def _has_dotted_token(lowered: bytes) -> bool:
    """Whether `lowered` has segments of [a-z0-9_-] of 24+, 6 and 27+ characters joined by
    dots, as every Discord bot token has (the middle segment sits between two dots)."""
    for word in lowered.translate(_DOTTED_ONLY).split():
        if len(word) < 59 or word.count(b".") < 2:
            continue
        parts = word.split(b".")
        for i in range(len(parts) - 2):
            if len(parts[i]) >= 24 and len(parts[i + 1]) == 6 and len(parts[i + 2]) >= 27:
                return True
    return False


def _literal_may_match(text: str) -> bool:
    """Whether some shape may match `text` itself. Every character of `text` is at most
    U+00FF, and none of those folds to an ASCII letter, so lowering the ASCII letters
    (``bytes.lower``) keeps every case-insensitive match of the ASCII anchors."""
    lowered = text.encode("latin-1").lower()
    if any(anchor in lowered for anchor in _ALL_ANCHORS):
        return True
    return _has_hex_run(lowered) or _has_dotted_token(lowered)


def _may_contain(text: str) -> bool:
    """False only when no shape can match `text`, nor the text with percent-escapes or
    invisible characters decoded, nor its base64 runs decoded: then `find_secrets` finds
    nothing and `contains_secret` is False, whatever shapes they are asked for."""
    if "%" in text or len(text) > _PREFILTER_MAX or not text.isascii():
        return True  # decoding may join or reveal anything (or too long): the scanner reads it
    if _literal_may_match(text):
        return True
    blob = _base64_blob(text)
    return bool(blob) and _literal_may_match(blob)


def _skip_scan(scanner: _Scanner, text: str) -> bool:
    """Whether `scanner` need not read `text`: it is not compiled yet, this process is
    still within its pre-filter budget, and the pre-filter rules every secret out."""
    if scanner.compiled:
        return False
    _prefiltered[0] += 1
    _prefiltered[1] += len(text)
    if _prefiltered[0] > _PREFILTER_CALLS or _prefiltered[1] > _PREFILTER_CHARS:
        return False
    return not _may_contain(text)


def find_secrets(text: str, shapes: Collection[str] | None = None) -> list[SecretFinding]:
    """Secrets in ``text``, non-overlapping and ordered by start.

    ``shapes`` restricts the scan to those shape names (a single name may be passed as a
    string); an unknown name raises ValueError. For context-dependent shapes (assignments,
    headers, URLs) a finding covers the secret value only, not its key or context. A secret
    visible only once decoded (percent-escapes or invisible characters inside a word, a
    base64 run) is found too: the finding covers the encoded word or run.
    """
    scanner = _select(shapes)
    if scanner is None or len(text) < _MIN_SECRET_LEN:
        return []
    if _skip_scan(scanner, text):
        return []
    text = re2_text(text)
    return _merge(scanner.findall(text), _encoded(text, scanner))


def contains_secret(text: str, shapes: Collection[str] | None = None) -> bool:
    """Whether ``text`` contains any secret (of the given ``shapes``, if any), encoded
    ones included (see `find_secrets`)."""
    if shapes is None and "%" not in text and text.isascii() and len(text) >= _MIN_SECRET_LEN:
        # Every record the writer stores comes here. Once the detector is built, the
        # general path below is these two searches for ASCII text without "%": nothing can
        # hide behind a percent-escape or an invisible character in it.
        search = _all_shapes_scanner()._search
        if search is not None:
            if search(text):
                return True
            blob = _base64_blob(text)
            return bool(blob) and bool(search(blob))
    scanner = _select(shapes)
    if scanner is None or len(text) < _MIN_SECRET_LEN:
        return False
    if _skip_scan(scanner, text):
        return False
    text = re2_text(text)
    return scanner.search(text) or any(_may_hide(text, scanner))


# Joins texts for one scan: not a character of any shape's token, nor a base64 letter, so a
# match in one text is a match in the joined text, and two texts' halves never join into one.
_TEXT_JOIN = "\n\x00\n"


def contains_secret_in_any(texts: Sequence[str]) -> bool:
    """Whether some text of ``texts`` contains a secret of any shape, encoded ones included.

    False proves every text clean: it is never False where `contains_secret` of one text is
    True. True says look closer: it may also be said where no single text holds a secret
    (a match spanning two decoded base64 runs). Once the scanner is built, the plain ASCII
    texts are read in one scan of all of them joined (the writer asks this of every batch)
    and a text with ``%`` or non-ASCII characters is asked alone; before that, the texts
    joined are asked as one (`contains_secret`).
    """
    search = _all_shapes_scanner()._search
    joined = _TEXT_JOIN.join(texts)
    if search is None:
        # One pre-filtered text, not one per text: a hook call's records hold dozens of
        # texts, and every text asked counts against the pre-filter's budget.
        return contains_secret(joined)
    if "%" in joined or not joined.isascii():
        # The others still go in one scan, in order: then what is said of a batch of
        # records' texts is said of every record's own texts (those of a record are
        # consecutive), which is what lets the writer ask a batch before asking each record.
        plain = [t for t in texts if "%" not in t and t.isascii()]
        if len(plain) < len(texts) and any(
            contains_secret(t) for t in texts if "%" in t or not t.isascii()
        ):
            return True
        joined = _TEXT_JOIN.join(plain)
    if search(joined):
        return True
    blob = _base64_blob(joined)
    return bool(blob) and bool(search(blob))


def _replace(text: str, findings: list[SecretFinding]) -> str:
    parts: list[str] = []
    position = 0
    for finding in findings:
        parts.append(text[position : finding.start])
        parts.append(f"[REDACTED:{finding.shape}]")
        position = finding.end
    parts.append(text[position:])
    return "".join(parts)


def mask_secrets(text: str) -> tuple[str, int]:
    """``text`` with every secret replaced by ``[REDACTED:<shape>]``, and how many were.

    Only the value of an assignment, header or URL credential is replaced
    (``password=[REDACTED:password_assignment]``); token-like secrets are replaced whole.
    The result contains no findings, so masking is idempotent.
    """
    count = 0
    for _ in range(_MAX_MASK_PASSES):
        findings = find_secrets(text)
        if not findings:
            break
        count += len(findings)
        text = _replace(text, findings)
    return text, count


# Key names (lower case, letters and digits only) whose value is a secret whatever it looks
# like: `password`, `api_key`, `X-Api-Key`, `client_secret`, `aws_secret_access_key`, ...
_SECRET_KEY_PARTS = ("password", "passwd", "passphrase")
_SECRET_KEY_ENDS = (
    "secret",
    "apikey",
    "token",
    "secretkey",
    "secretaccesskey",
    "privatekey",
    "authorization",
    "credential",
    "credentials",
    "accountkey",
    "cookie",
)


def names_secret(key: str) -> bool:
    """Whether a key, header or flag name says its value is a secret (``password``,
    ``client_secret``, ``X-Api-Key``, ``--api-token``, ``Authorization``, ...)."""
    # Keys repeat (every record has the same few), so short ones are remembered.
    return _names_secret(key) if len(key) <= 64 else _key_says_secret(key)


@functools.lru_cache(maxsize=4096)
def _names_secret(key: str) -> bool:
    return _key_says_secret(key)


def _key_says_secret(key: str) -> bool:
    name = "".join(c for c in key.lower() if c.isascii() and c.isalnum())
    return any(part in name for part in _SECRET_KEY_PARTS) or name.endswith(_SECRET_KEY_ENDS)


def shape_names() -> tuple[str, ...]:
    """The names of all known shapes, in scanning-priority order."""
    return _SHAPE_NAMES
