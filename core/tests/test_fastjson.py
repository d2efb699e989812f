"""A young process encodes without orjson, and loads it once it has encoded enough."""

from __future__ import annotations

import json
import subprocess
import sys

_PROCESS = """
import json, sys
from charter._audit.chain import ChainHead, decode_json, prepare_entry, seal
from charter._model import fastjson
from charter._model.ijson import canonical_digest, canonical_json

entry = {"agent_id": "a", "task_id": "t", "kind": "step.exec",
         "timestamp": "2026-12-03T10:00:00Z", "input": {"b": [1.5, "\\u00e9"], "a": None}}
def encode():
    sealed = seal(prepare_entry(entry, checked=True), ChainHead(0, None))
    return [sealed.body.decode(), sealed.hash, canonical_json(entry).decode(),
            canonical_digest(entry), decode_json(sealed.body)]
young = encode()
loaded_while_young = "orjson" in sys.modules
for _ in range(fastjson.YOUNG):
    canonical_json(entry)
print(json.dumps([young, loaded_while_young, "orjson" in sys.modules, encode()]))
"""


def test_a_young_process_writes_the_same_records_without_orjson_and_then_loads_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROCESS], capture_output=True, text=True, check=True
    )
    young, loaded_while_young, loaded_after, old = json.loads(out.stdout)
    assert not loaded_while_young, "importing Charter and sealing a record loaded orjson"
    assert loaded_after, "still without orjson after YOUNG encodings"
    assert young == old
