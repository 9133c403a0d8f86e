"""Erasure reaches the in-process caches: a `Packer`, a `Replayer` or a `Session` that
packed, replayed or counted before an erase shows no erased text after it, in the
same process (docs/erasure.md, "Caches")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import turnlog
from turnlog import Log, Packer
from turnlog.events import SessionForked, UserMessageAdded

from tests.test_erasure import POLICY, SECRET, SESSION, TOOL_SECRET, conversation


@pytest.fixture(params=["lmdb", "memory"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    location = str(tmp_path / "store") if request.param == "lmdb" else ":memory:"
    with turnlog.open(location) as opened:
        yield opened


def _text(value: object) -> str:
    return msgspec.json.encode(value).decode()


def test_a_packer_that_packed_before_an_erase_shows_placeholders_after_it(log: Log) -> None:
    replayer = conversation(log)
    packer = replayer.packer
    before = packer.pack(SESSION, policy=POLICY)
    assert SECRET in _text(before.prompt)
    log.erase(SESSION, [0, 4], reason="leaked key")
    after = packer.pack(SESSION, policy=POLICY)
    assert SECRET not in _text(after.prompt) and TOOL_SECRET not in _text(after.prompt)
    assert SECRET not in _text(after.decisions)
    # The same prompt as a packer made afresh.
    assert after.prompt.hash == Packer(log).pack(SESSION, policy=POLICY).prompt.hash


def test_a_replayer_that_replayed_before_an_erase_reports_it_after(log: Log) -> None:
    replayer = conversation(log)
    requests = replayer.requests(SESSION)
    assert all(r.ok for r in replayer.replay_all(SESSION))
    assert SECRET in _text(replayer.repack(SESSION, requests[0]).prompt)
    log.erase(SESSION, [0], reason="leaked key")
    for seq in requests:
        assert SECRET not in _text(replayer.repack(SESSION, seq).prompt)
        assert SECRET not in _text(replayer.explain(SESSION, seq).decisions)
    results = [replayer.replay(SESSION, seq) for seq in requests]
    assert [r.erased_by for r in results] == [8, 8]


def test_a_fork_packed_before_its_parent_is_erased_shows_placeholders(log: Log) -> None:
    replayer = conversation(log)
    head = log.head(SESSION)
    assert head is not None
    log.append(
        "child", SessionForked(from_session=SESSION, from_seq=head.seq, from_hash=head.hash.hex())
    )
    log.append("child", UserMessageAdded(text="and now?"))
    packer = replayer.packer
    assert SECRET in _text(packer.pack("child", policy=POLICY).prompt)
    log.erase(SESSION, [0], reason="leaked key")
    assert SECRET not in _text(packer.pack("child", policy=POLICY).prompt)


def test_a_session_that_prepared_before_an_erase_sends_no_erased_text(log: Log) -> None:
    from turnlog.adapters import Session

    session = Session(log, "chat", model="gpt-4o-mini", policy=POLICY)
    session.user(f"my key is {SECRET}")
    assert SECRET.encode() in session.prepare().body
    log.erase("chat", [0], reason="leaked key")
    session.user("go on")
    body = session.prepare().body
    assert SECRET.encode() not in body and b"[erased]" in body


def test_no_token_count_digest_of_erased_text_is_left_in_the_store(tmp_path: Path) -> None:
    # A count is kept per xxh3 digest of the counted text: a digest of erased text would
    # confirm a guess of it, so an erasure empties the persisted counts (derived data).
    import uuid

    import xxhash

    text = f"only this test says {uuid.uuid4().hex}"  # counted here first
    with turnlog.open(str(tmp_path / "store")) as log:
        replayer = conversation(log)
        log.append(SESSION, UserMessageAdded(text=text))
        replayer.packer.pack(SESSION, policy=POLICY)
        replayer.packer.flush()
        digest = xxhash.xxh3_128_digest(text.encode())
        data = tmp_path / "store" / "data.mdb"
        assert digest in data.read_bytes()
        log.erase(SESSION, [8], reason="leaked key")
        replayer.packer.pack(SESSION, policy=POLICY)
        replayer.packer.flush()
        assert digest not in data.read_bytes()
        assert log.verify().ok
        # Counted before an erasure but not saved yet: never saved after it.
        unsaved = f"counted, not saved {uuid.uuid4().hex}"
        seq = log.append(SESSION, UserMessageAdded(text=unsaved)).last_seq
        replayer.packer.pack(SESSION, policy=POLICY)
        log.erase(SESSION, [seq], reason="leaked key")
        replayer.packer.flush()
        assert xxhash.xxh3_128_digest(unsaved.encode()) not in data.read_bytes()
        # Counted again as sessions are packed: the same prompt as before the wipe.
        assert (
            Packer(log).pack(SESSION, policy=POLICY).prompt.hash
            == replayer.packer.pack(SESSION, policy=POLICY).prompt.hash
        )
