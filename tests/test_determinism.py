"""Hashes depend on content only: not on the process, its hash seed, or dict insertion order.

`chain_hashes` appends a fixed set of events (meta dicts with many keys built
in orders that depend on the hash seed, nested dicts, a policy) to a memory and
an LMDB log and returns every hash. It runs here and in fresh interpreters with
``PYTHONHASHSEED=0`` and ``12345``; all must agree, and with a pinned value.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import turnlog
from turnlog import Draft
from turnlog.events import UserMessageAdded

# The hash of `golden_event` at seq 0 of a new session. Stored events are permanent:
# if this changes, every existing log stops verifying.
GOLDEN = "f81bd02d2def40ce55e591436e5af7530bf07a2af9cc41e2cd4618465484411b"


def chain_hashes(directory: str) -> dict[str, list[str]]:
    """Append the same events to a memory and an LMDB log; return their hashes (hex)."""
    import turnlog
    from turnlog import Draft, Policy
    from turnlog.events import (
        AssistantMessageAdded,
        PolicySet,
        TextPart,
        ToolCall,
        ToolResultAdded,
        UserMessageAdded,
    )

    words = {f"key-{i:03d}-{'x' * (i % 7)}" for i in range(300)}  # set order varies by seed
    forward = {word: len(word) for word in words}
    backward = {word: len(word) for word in sorted(words, reverse=True)}
    nested = {"outer": {w: {"v": [i, str(i), i / 4]} for i, w in enumerate(sorted(words))}}
    renested = {
        "outer": {w: {"v": [i, str(i), i / 4]} for i, w in reversed(list(enumerate(sorted(words))))}
    }
    policy = Policy(tool_kinds={w: "bash" for w in words}, input_price=2.5)
    drafts = [
        Draft(body=UserMessageAdded(text="hello"), time=1, meta=forward),
        Draft(body=UserMessageAdded(text="hello"), time=1, meta=backward),
        Draft(
            body=AssistantMessageAdded(
                parts=(
                    TextPart(text="hi"),
                    ToolCall(id="c1", name="bash", arguments='{"b": 1, "a": 2}'),
                )
            ),
            meta=nested,
        ),
        Draft(
            body=AssistantMessageAdded(
                parts=(
                    TextPart(text="hi"),
                    ToolCall(id="c1", name="bash", arguments='{"b": 1, "a": 2}'),
                )
            ),
            meta=renested,
        ),
        Draft(body=ToolResultAdded(call_id="c1", tool_name="bash", output="é" * 40_000)),
        Draft(body=PolicySet(policy=policy), key="policy", causation="setup"),
        Draft(body=UserMessageAdded(text="\u2603 \U0001f600 \x00 tab\t"), time=-(2**63)),
    ]
    out: dict[str, list[str]] = {}
    for name, target in (("memory", ":memory:"), ("lmdb", f"{directory}/store")):
        with turnlog.open(target) as log:
            for draft in drafts:
                log.append("s", draft)
            log.fork("s", 2, "f")
            out[name] = [e.hash.hex() for e in log.read("s") + log.read("f")]
    out["policy"] = [policy.hash]
    return out


def golden_event_hash() -> str:
    """The hash of the pinned event, appended to a fresh in-memory log."""
    with turnlog.open(":memory:") as log:
        done = log.append(
            "golden",
            Draft(
                body=UserMessageAdded(text="hello"), time=0, meta={"b": 1, "a": [1.5, None, True]}
            ),
        )
        return done.head_hash.hex()


SCRIPT = "\n".join(
    [
        inspect.getsource(chain_hashes),
        textwrap.dedent("""
        import json, sys
        print(json.dumps(chain_hashes(sys.argv[1])))
    """),
    ]
)


def run_with_seed(seed: str, directory: Path) -> dict[str, list[str]]:
    """Run `chain_hashes` in a fresh interpreter with ``PYTHONHASHSEED=seed``."""
    script = directory / "hashes.py"
    script.write_text("from __future__ import annotations\n" + SCRIPT)
    env = {**os.environ, "PYTHONHASHSEED": seed}
    run_dir = directory / f"seed-{seed}"
    run_dir.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


def test_meta_insertion_order_does_not_change_the_hash() -> None:
    forward = {f"k{i}": {"n": i, "s": str(i)} for i in range(100)}
    backward = dict(reversed(list(forward.items())))
    assert list(forward) != list(backward)
    hashes = []
    for meta in (forward, backward):
        with turnlog.open(":memory:") as log:
            done = log.append("s", Draft(body=UserMessageAdded(text="x"), meta=meta))
            hashes.append(done.head_hash)
    assert hashes[0] == hashes[1]


def test_memory_and_lmdb_compute_the_same_hashes() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hashes = chain_hashes(tmp)
    assert hashes["memory"] == hashes["lmdb"]
    assert len(hashes["memory"]) == 8


def test_hashes_are_the_same_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    zero = run_with_seed("0", tmp_path)
    other = run_with_seed("12345", tmp_path)
    with tempfile.TemporaryDirectory() as tmp:
        here = chain_hashes(tmp)
    assert zero == other == here


def test_a_pinned_event_keeps_its_hash() -> None:
    assert golden_event_hash() == GOLDEN
