"""The name and path checks of template files, and word splitting, held to their definitions.

The loader checks names and paths with string methods and splits plain words without
regular expressions (compiling those cost every fresh process); each must accept exactly
what the expression it stands for accepts, and split exactly as the expressions split.
"""

from __future__ import annotations

import re

from charter_templates._load import _is_integration, _is_output_path, _is_path, _is_plain_key
from charter_templates._words import split_words
from hypothesis import example, given, settings
from hypothesis import strategies as st

PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
INDEXES = r"(?:\[(?:\d+|\*)\])*"
OUTPUT_PATH = re.compile(rf"(?:[^.\[\]]+|\[(?:\d+|\*)\]){INDEXES}(?:\.[^.\[\]]+{INDEXES})*")
INTEGRATION = re.compile(r"[a-z][a-z0-9_]*")
CHUNK = re.compile(r"[^\W_]+")
PART = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")

# Characters each check cares about, plus a few that look like them (Unicode letters and
# digits, which str methods and regular expressions treat differently).
_ALPHABET = st.sampled_from(
    [*"aAzZ_-.09[]*x \n", "é", "ß", "İ", "٣", "½", "²", "ǅ", "ａ", "\u0131", "\x00"]
)
_texts = st.text(_ALPHABET, max_size=12)


@settings(max_examples=1500, deadline=None)
@given(text=_texts)
@example("a.b_c.D9")
@example("a..b")
@example("emails[*].sender")
@example("[*].from")
@example("[0][12]")
@example("a[٣]")
@example("a[²]")
@example("a[]")
@example("a[1]]")
@example("a.[1]")
@example("")
def test_each_check_accepts_what_its_expression_accepts(text: str) -> None:
    assert _is_path(text) == bool(PATH.fullmatch(text))
    assert _is_plain_key(text) == bool(PLAIN_KEY.fullmatch(text))
    assert _is_output_path(text) == bool(OUTPUT_PATH.fullmatch(text))
    assert _is_integration(text) == bool(INTEGRATION.fullmatch(text))


def _split_by_expressions(name: str) -> tuple[str, ...]:
    return tuple(part.lower() for chunk in CHUNK.findall(name) for part in PART.findall(chunk))


@settings(max_examples=1500, deadline=None)
@given(name=st.text(st.sampled_from([*"abzAZ_-.09 ", "é", "İ", "\u0131", "ǅ"]), max_size=14))
@example("send_email")
@example("post")
@example("__a")
@example("a__b")
@example("getHTTPResponse")
@example("Bash")
@example("B")
@example("Web_Fetch")
@example("BaSh")
@example("URLs")
def test_split_words_splits_as_the_expressions_do(name: str) -> None:
    assert split_words(name) == _split_by_expressions(name)
