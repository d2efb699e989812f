"""Fresh ids: 32 hex digits, unique in a process, across processes and across a fork."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from charter import Governor
from charter._model.identifiers import check_identifier, new_id
from charter.testing import recorded
from hypothesis import given
from hypothesis import strategies as st

_PRINT_IDS = "from charter._model.identifiers import new_id\nprint(*(new_id() for _ in range(500)))"


def test_ids_are_hex_and_valid_task_and_action_ids() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for i in ids[:100]:
        assert len(i) == 32 and int(i, 16) >= 0 and i == i.lower()
        check_identifier("task_id", i)
        check_identifier("action_id", i)


_GRAMMAR = re.compile(r"[A-Za-z0-9._:-]{1,255}")


@given(
    st.one_of(
        st.text(),
        st.text(alphabet="abcXYZ019._:-", min_size=1),
        # look-alikes: letters and digits outside ASCII, which str.isalnum accepts
        st.text(alphabet="a1\u0663\u00df\u0410\uff11 \t/", min_size=1),
    )
)
def test_an_identifier_is_ascii_letters_digits_and_dot_underscore_colon_dash(
    value: str,
) -> None:
    if _GRAMMAR.fullmatch(value):
        assert check_identifier("action_id", value) == value
    else:
        with pytest.raises(ValueError, match="action_id"):
            check_identifier("action_id", value)


def test_the_next_id_is_not_the_last_one_plus_one() -> None:
    a, b = new_id(), new_id()
    assert a[20:] == b[20:]  # the process's suffix
    assert int(b[12:20], 16) == int(a[12:20], 16) + 1  # its counter
    assert a[:12] != b[:12]  # after a keyed digest nobody can compute without the key


def test_ids_differ_in_their_first_digits() -> None:
    # `charter show` and `--task` find a task by a short prefix of its id.
    assert len({new_id()[:6] for _ in range(100)}) >= 99


def test_processes_draw_their_own_ids() -> None:
    runs = [
        subprocess.run(
            [sys.executable, "-c", _PRINT_IDS], capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(3)
    ]
    mine = {new_id() for _ in range(500)}
    seen = set().union(*runs, mine)
    assert len(seen) == 4 * 500


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write, " ".join(new_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    parent = {new_id() for _ in range(100)}
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    assert len(child) == 100 and not child & parent


def test_governed_steps_get_distinct_ids(tmp_path: Path) -> None:
    gov = Governor(policies=[], audit_location=f"sqlite:///{tmp_path / 'a.db'}")
    with gov.task() as task:
        for n in range(5):
            gov.begin_step("step.exec", name="ls", input={"n": n}).complete({"ok": True})
    records = recorded(gov)
    gov.close()
    assert len(task.task_id) == 32
    actions = [r["action_id"] for r in records if r["kind"] == "step.exec"]
    assert len(set(actions)) == 5 and all(len(a) == 32 for a in actions)
