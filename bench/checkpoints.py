"""Signed checkpoints benchmark: prints figures, asserts nothing.

    uv run python bench/checkpoints.py

1. Signing one chain head (Ed25519 over its canonical JSON) and checking the signature.
2. Governed steps in sync durability, tasks of 10 steps, without a signing key and with one
   (a checkpoint at every task end, kept in the SQLite store and appended to a checkpoint
   file): p50/p99 per step as the agent sees it, and per task end.
3. `verify` of a store of 1,000 tasks without a key and with the key and the checkpoint file,
   for SQLite and JSONL.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from charter import Governor
from charter._audit.checkpoint import sign_head
from charter._audit.signing import load_signing_key
from charter.audit import create_key_pair, load_public_key, verify


def _percentiles(samples: list[int]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2] / 1000, samples[int(len(samples) * 0.99)] / 1000


def signing(directory: Path) -> None:
    pair = create_key_pair(directory / "bench-key")
    key, public = load_signing_key(pair.private_path), load_public_key(pair.public_path)
    when = datetime.now(UTC)
    rounds = 2_000
    start = time.perf_counter()
    made = [sign_head(key, "agent", f"t{i}", i + 1, "a" * 64, when) for i in range(rounds)]
    signed = (time.perf_counter() - start) / rounds * 1e6
    start = time.perf_counter()
    for c in made:
        public.verifies(c.signature, c.signed_bytes())
    checked = (time.perf_counter() - start) / rounds * 1e6
    print(f"sign one head: {signed:.0f} us; check one signature: {checked:.0f} us")


def governed(directory: Path, signed: bool, tasks: int = 60) -> tuple[list[int], list[int]]:
    extra = {}
    if signed:
        extra = {
            "signing_key": str(directory / "bench-key"),
            "checkpoint_file": str(directory / "checkpoints.jsonl"),
        }
    name = "signed" if signed else "plain"
    gov = Governor(
        policies=[],
        audit_location=f"sqlite:///{directory / f'{name}.db'}",
        audit_durability="sync",
        agent_id="bench",
        **extra,
    )
    steps: list[int] = []
    ends: list[int] = []
    clock = time.perf_counter_ns
    for _ in range(tasks):
        scope = gov.task(name="bench")
        scope.__enter__()
        for i in range(10):
            t0 = clock()
            with gov.step("step.exec", name="Bash", input={"command": f"ls {i}"}) as s:
                s.output = {"exit_code": 0}
            steps.append(clock() - t0)
        t0 = clock()
        scope.__exit__(None, None, None)
        ends.append(clock() - t0)
    gov.close()
    return steps, ends


def verifying(directory: Path, kind: str, tasks: int = 1_000) -> None:
    suffix = "db" if kind == "sqlite" else "jsonl"
    location = f"{kind}:///{directory / f'many.{suffix}'}"
    outside = directory / f"many-{kind}.jsonl"
    gov = Governor(
        policies=[],
        audit_location=location,
        agent_id="bench",
        signing_key=str(directory / "bench-key"),
        checkpoint_file=str(outside),
        queue_size=100_000,
    )
    for _ in range(tasks):
        with (
            gov.task(name="bench"),
            gov.step("step.exec", name="Bash", input={"command": "ls"}) as s,
        ):
            s.output = {"exit_code": 0}
    gov.close()
    public = directory / "bench-key.pub"
    start = time.perf_counter()
    plain = verify(location)
    middle = time.perf_counter()
    keyed = verify(location, keys=[public], checkpoints=[outside])
    end = time.perf_counter()
    assert plain.ok and keyed.ok, (str(plain), str(keyed))
    print(
        f"verify {kind}, {tasks} tasks / {plain.steps_checked} records: no key "
        f"{middle - start:.2f} s; with key and checkpoint file ({keyed.checkpoints} "
        f"checkpoints) {end - middle:.2f} s"
    )


def main() -> None:
    print("signed checkpoints (2 shared cores; figures move with the machine's load)")
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        signing(directory)
        for signed in (False, True):
            steps, ends = governed(directory, signed)
            s50, s99 = _percentiles(steps)
            e50, e99 = _percentiles(ends)
            label = "with a signing key" if signed else "without a key     "
            print(
                f"sync step {label}: p50 {s50:.0f} us, p99 {s99:.0f} us; "
                f"task end p50 {e50:.0f} us, p99 {e99:.0f} us"
            )
        for kind in ("sqlite", "jsonl"):
            verifying(directory, kind)


if __name__ == "__main__":
    main()
