"""The persisted token-count cache is derived data: it is checked, never trusted.

A store keeps the token counts a `Packer` computed (``Packer.flush``), so a new
process packs a long session without tokenizing it again. These tests damage
that cache in the store as an outside writer would (every count set to 1, a
chunk counter set to a huge number, a flipped byte) and run the command in a
fresh process, whose tokenizer has counted nothing yet: replay must still
reproduce every request, pack must finish with the right counts, and verify
must report the damage without failing the chain check. The damage is written
for any layout of the cache (counts after a header shorter than one entry).
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
import turnlog

SESSION = "demo"
_ENTRY = struct.Struct("<16sI")


def turnlog_cli(store: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the installed command on ``store`` in a fresh process."""
    script = str(Path(sys.executable).with_name("turnlog"))
    env = {**os.environ, "TURNLOG_STORE": str(store)}
    return subprocess.run(
        [script, *argv], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def tamper_cache(store: Path, change: Callable[[bytes, bytes], bytes | None]) -> int:
    """Replace every value of the store's derived cache by ``change(key, value)`` (None
    keeps it); returns how many were changed."""
    env = lmdb.open(str(store), max_dbs=8, subdir=True)
    changed = 0
    try:
        db = env.open_db(b"cache", create=False)
        with env.begin(write=True, db=db) as txn:
            for key, value in list(txn.cursor()):
                new = change(bytes(key), bytes(value))
                if new is not None and new != value:
                    txn.put(key, new)
                    changed += 1
    finally:
        env.close()
    return changed


def counts_set_to(n: int) -> Callable[[bytes, bytes], bytes | None]:
    """Every persisted count becomes ``n`` (what follows any header of the value)."""

    def change(key: bytes, value: bytes) -> bytes | None:
        header = len(value) % _ENTRY.size
        if len(value) < _ENTRY.size or key.endswith(b"ids"):
            return None
        entries = [(k, n) for k, _ in _ENTRY.iter_unpack(value[header:])]
        return value[:header] + b"".join(_ENTRY.pack(*e) for e in entries)

    return change


def bookkeeping_set_to(text: bytes) -> Callable[[bytes, bytes], bytes | None]:
    """Every value that is not a chunk of counts (a chunk counter, an index: keys that do
    not end in ``:N``) becomes ``text``."""

    def change(key: bytes, value: bytes) -> bytes | None:
        return None if re.search(rb":[0-9]+$", key) else text

    return change


@pytest.fixture
def demo_store(tmp_path: Path) -> Path:
    """A store with a demo session whose requests were recorded (and counts saved)."""
    store = tmp_path / "store"
    done = turnlog_cli(store, "demo", "--turns", "6")
    assert done.returncode == 0, done.stderr
    assert turnlog_cli(store, "replay", SESSION).returncode == 0
    return store


def test_replay_reproduces_every_request_when_the_saved_counts_are_wrong(demo_store: Path) -> None:
    assert tamper_cache(demo_store, counts_set_to(1)) > 0
    done = turnlog_cli(demo_store, "replay", SESSION)
    assert done.returncode == 0, done.stdout
    assert "DIFFERS" not in done.stdout


def test_pack_finishes_with_the_right_counts_when_the_chunk_counter_is_damaged(
    demo_store: Path,
) -> None:
    expected = json.loads(turnlog_cli(demo_store, "pack", SESSION, "--json").stdout)
    assert tamper_cache(demo_store, bookkeeping_set_to(b"999999999999")) > 0
    done = turnlog_cli(demo_store, "pack", SESSION, "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens"] == expected["tokens"]


def test_pack_counts_right_when_the_saved_counts_are_wrong(demo_store: Path) -> None:
    expected = json.loads(turnlog_cli(demo_store, "pack", SESSION, "--json").stdout)
    tamper_cache(demo_store, counts_set_to(1))
    done = turnlog_cli(demo_store, "pack", SESSION, "--json", timeout=60)
    assert json.loads(done.stdout)["tokens"] == expected["tokens"]


@pytest.mark.parametrize(
    "damage", [counts_set_to(1), bookkeeping_set_to(b"999999999999")], ids=["counts", "bookkeeping"]
)
def test_verify_reports_a_damaged_count_cache_without_failing(
    demo_store: Path, damage: Callable[[bytes, bytes], bytes | None]
) -> None:
    assert "warning" not in turnlog_cli(demo_store, "verify").stdout
    tamper_cache(demo_store, damage)
    done = turnlog_cli(demo_store, "verify")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("ok:")
    assert "warning: " in done.stdout and "token-count cache" in done.stdout, done.stdout
    report = json.loads(turnlog_cli(demo_store, "verify", "--json").stdout)
    assert report["ok"] and report["warnings"]
    with turnlog.open(demo_store, readonly=True) as log:
        checked = log.verify()
        assert checked.ok and checked.warnings == tuple(report["warnings"])


def test_damaged_counts_are_rewritten_by_the_next_pack_that_saves_counts(demo_store: Path) -> None:
    tamper_cache(demo_store, counts_set_to(1))
    assert "warning: " in turnlog_cli(demo_store, "verify").stdout
    recorded = turnlog_cli(demo_store, "pack", SESSION, "--record")
    assert recorded.returncode == 0, recorded.stderr
    done = turnlog_cli(demo_store, "verify")
    assert done.returncode == 0 and "warning" not in done.stdout, done.stdout
    assert turnlog_cli(demo_store, "replay", SESSION).returncode == 0


def test_a_cache_in_the_layout_before_digests_is_not_read(tmp_path: Path) -> None:
    # The layout before digests: "tokens" namespace, a decimal chunk counter and bare
    # chunks. A store holding one packs and replays as if it had no cache at all.
    store = tmp_path / "store"
    assert turnlog_cli(store, "demo", "--turns", "3").returncode == 0
    expected = json.loads(turnlog_cli(store, "pack", SESSION, "--json").stdout)["tokens"]
    with turnlog.open(store) as log:
        bogus = b"".join(_ENTRY.pack(bytes([i]) * 16, 1) for i in range(50))
        log.store.write(
            lambda txn: (
                txn.put_cached("tokens", b"cl100k_base:chunks", b"9" * 12),
                txn.put_cached("tokens", b"cl100k_base:0", bogus),
            )
        )
    done = turnlog_cli(store, "pack", SESSION, "--json", timeout=60)
    assert json.loads(done.stdout)["tokens"] == expected
    assert turnlog_cli(store, "replay", SESSION).returncode == 0
