"""Erasure: the content of chosen events leaves the store and its files, and the
chain still verifies (docs/erasure.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import turnlog
from turnlog import Draft, Log, Packer, Policy, Replayer
from turnlog.errors import (
    IdempotencyError,
    InvalidArgumentError,
    InvalidEventError,
    UnknownEventError,
    UnknownSessionError,
)
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    ContentErased,
    EventErased,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

from tests.support import GOLDEN_VERSIONS, dump

SESSION = "s"
POLICY = Policy(context_window=200_000, output_reserve=500)
SECRET = "sk-live-SECRETUSERTEXT-4242"
TOOL_SECRET = "TOOLOUTPUT-PASSWORD-hunter2-"
SUMMARY_SECRET = "SUMMARYQUOTE-SECRETUSERTEXT"


@pytest.fixture(params=["lmdb", "memory"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    location = str(tmp_path / "store") if request.param == "lmdb" else ":memory:"
    with turnlog.open(location) as opened:
        yield opened


def conversation(log: Log) -> Replayer:
    """s#0 user (secret), #1 policy, #2 request, #3 assistant with a call, #4 tool
    result in a blob (secret), #5 user, #6 request, #7 assistant."""
    replayer = Replayer(Packer(log))
    log.append(SESSION, UserMessageAdded(text=f"my key is {SECRET}"))
    replayer.record(SESSION, policy=POLICY, model="m")
    log.append(
        SESSION,
        AssistantMessageAdded(
            parts=(TextPart(text="reading it"), ToolCall(id="c1", name="cat", arguments="{}"))
        ),
    )
    log.append(
        SESSION, ToolResultAdded(call_id="c1", tool_name="cat", output=TOOL_SECRET * 8000)
    )  # > blob threshold
    log.append(SESSION, UserMessageAdded(text="thanks"))
    replayer.record(SESSION, policy=POLICY, model="m")
    log.append(SESSION, AssistantMessageAdded(parts=(TextPart(text="done"),)))
    return replayer


def raw_bytes(log: Log) -> bytes:
    """Every byte the store keeps: data.mdb (and lock.mdb) for LMDB, the dump otherwise."""
    if log.store.name == "lmdb":
        root = Path(log.store.location)
        return b"".join(p.read_bytes() for p in sorted(root.iterdir()) if p.is_file())
    return repr(dump(log)).encode() + repr(log.store._blobs).encode()  # type: ignore[attr-defined]


def test_erase_a_user_message_and_a_tool_output_in_a_blob(log: Log) -> None:
    conversation(log)
    assert SECRET.encode() in raw_bytes(log) and TOOL_SECRET.encode() in raw_bytes(log)
    before = {e.seq: e.hash for e in log.read(SESSION)}
    erased = log.erase(SESSION, [0, 4], reason="data-subject request", time=99)
    assert erased.seq == 8 and erased.seqs == (0, 4) and len(erased.blobs) == 1
    raw = raw_bytes(log)
    assert SECRET.encode() not in raw
    assert TOOL_SECRET.encode() not in raw
    events = log.read(SESSION)
    assert {e.seq: e.hash for e in events[:8]} == before  # hashes kept
    assert isinstance(events[0].body, EventErased) and events[0].body.by == 8
    assert events[4].body == EventErased(
        kind="tool_result", by=8, call_ids=("c1",), tool_names=("cat",)
    )
    record = events[8].body
    assert isinstance(record, ContentErased)
    assert record.seqs == (0, 4) and record.reason == "data-subject request"
    assert record.hashes == (before[0].hex(), before[4].hex())
    for strict in (False, True):
        report = log.verify(strict=strict)
        assert report.ok, report.problem
        assert report.erased == ((SESSION, 0, 8), (SESSION, 4, 8))
    assert log.verify(SESSION).ok


def test_packing_shows_placeholders_and_replay_reports_erased(log: Log) -> None:
    replayer = conversation(log)
    log.erase(SESSION, [4], reason="leaked password")
    prompt = Packer(log).pack(SESSION, policy=POLICY).prompt
    text = msgspec.json.encode(prompt).decode()
    assert TOOL_SECRET not in text and "[erased]" in text
    results = list(replayer.replay_all(SESSION))
    # The first request predates the tool output: reproduced; the second held it.
    assert [r.ok for r in results] == [True, False]
    assert results[1].erased_by == 8 and "erased" in results[1].difference


def test_whole_session_and_a_summary_that_quoted_it(log: Log) -> None:
    conversation(log)
    digest = "0" * 64
    log.append(
        SESSION,
        CompactionCommitted(
            first_seq=0, last_seq=2, covered_digest=digest, summary=f"user said {SUMMARY_SECRET}"
        ),
    )
    log.append("other", UserMessageAdded(text="kept text"))
    erased = log.erase(SESSION, [0], reason="gdpr")
    assert erased.seqs == (0, 8)  # with the compaction covering #0
    assert SUMMARY_SECRET.encode() not in raw_bytes(log)
    everything = log.erase(SESSION, reason="account deleted")
    assert everything.already == erased.seqs
    raw = raw_bytes(log)
    for text in (SECRET, TOOL_SECRET, "reading it", "thanks", "done"):
        assert text.encode() not in raw, text
    assert b"kept text" in raw
    report = log.verify()
    assert report.ok, report.problem
    kept = {e.kind for e in log.read(SESSION)}
    assert kept == {"erased", "erasure", "policy"}  # a policy holds no content


def test_erasing_twice_is_idempotent(log: Log) -> None:
    conversation(log)
    first = log.erase(SESSION, [0], reason="r")
    state = dump(log)
    again = log.erase(SESSION, [0], reason="r")
    assert again.seq is None and again.already == (0,) and again.seqs == ()
    assert dump(log) == state
    assert first.seq == 8


def test_a_retry_of_an_erased_event_is_a_duplicate_and_its_content_stays_erased(
    log: Log,
) -> None:
    # A transcript imported again after an erasure: its keyed events retry as before.
    draft = Draft(body=UserMessageAdded(text=f"my key is {SECRET}"), key="k0", time=5)
    log.append(SESSION, draft)
    log.append(SESSION, Draft(body=UserMessageAdded(text="next"), key="k1", time=6))
    log.erase(SESSION, [0], reason="data-subject request")
    state = dump(log)
    again = log.append(SESSION, draft)
    assert again.duplicate and again.first_seq == 0
    assert dump(log) == state and SECRET.encode() not in raw_bytes(log)
    other = Draft(body=UserMessageAdded(text="something else"), key="k0", time=5)
    with pytest.raises(IdempotencyError, match="different content"):
        log.append(SESSION, other)
    assert dump(log) == state


def test_unknown_session_or_seq_changes_nothing(log: Log) -> None:
    conversation(log)
    state = dump(log)
    with pytest.raises(UnknownSessionError, match="no session 'nope'"):
        log.erase("nope", reason="r")
    with pytest.raises(UnknownEventError, match="no event at seq 99"):
        log.erase(SESSION, [0, 99], reason="r")
    with pytest.raises(InvalidArgumentError):
        log.erase(SESSION, [-1], reason="r")
    with pytest.raises(InvalidArgumentError):
        log.erase(SESSION, [0], reason="")
    assert dump(log) == state
    log.erase(SESSION, [0], reason="r")
    with pytest.raises(InvalidArgumentError, match="never erased"):
        log.erase(SESSION, [8], reason="r")  # the erasure event itself


def test_erasure_kinds_cannot_be_appended(log: Log) -> None:
    conversation(log)
    with pytest.raises(InvalidEventError, match=r"Log\.erase"):
        log.append(SESSION, EventErased(kind="user", by=9))
    with pytest.raises(InvalidEventError, match=r"Log\.erase"):
        log.append(SESSION, ContentErased(seqs=(0,), hashes=("0" * 64,), reason="x"))


def _records(log: Log) -> list[bytes]:
    return log.store._events[SESSION]  # type: ignore[attr-defined,no-any-return]


def test_tamper_is_still_caught_around_erased_events() -> None:
    log = turnlog.open(":memory:")
    conversation(log)
    log.erase(SESSION, [0], reason="r")
    records = _records(log)
    # A byte changed in an event that was not erased.
    original = records[5]
    records[5] = original.replace(b"thanks", b"THANKS")
    assert log.verify().problem.seq == 5  # type: ignore[union-attr]
    records[5] = original
    assert log.verify().ok
    # A stub put in place of an event the erasure does not list.
    forged = msgspec.msgpack.decode(records[0][64:])
    forged["seq"] = 3
    records[3] = records[3][:64] + msgspec.msgpack.encode(forged)
    problem = log.verify().problem
    assert problem is not None and problem.seq == 3, problem
    assert "not the one erasure event #8 lists" in problem.reason


def test_the_erase_command(tmp_path: Path) -> None:
    from turnlog.tools.cli import main

    store = str(tmp_path / "store")
    with turnlog.open(store) as log:
        log.append(
            SESSION,
            [
                Draft(body=UserMessageAdded(text=f"old {SECRET}"), time=1),
                Draft(body=UserMessageAdded(text="recent"), time=2**62),
            ],
        )
        log.append("other", Draft(body=UserMessageAdded(text=TOOL_SECRET), time=5))
    assert main(["--store", store, "erase", "nope", "--reason", "r"]) != 0
    assert main(["--store", store, "erase", SESSION, "7", "--reason", "r"]) != 0
    assert main(["--store", store, "erase", "--older-than", "30", "--reason", "retention"]) == 0
    raw = (tmp_path / "store" / "data.mdb").read_bytes()
    assert SECRET.encode() not in raw and TOOL_SECRET.encode() not in raw
    assert b"recent" in raw
    assert main(["--store", store, "erase", SESSION, "--reason", "all"]) == 0
    assert b"recent" not in (tmp_path / "store" / "data.mdb").read_bytes()
    assert main(["--store", store, "verify"]) == 0


_CHILD = """
import os, signal, sys
import turnlog
from turnlog import _lmdb

phase, store = sys.argv[1], sys.argv[2]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if phase == "in-transaction":  # the stubs are written, the commit has not happened
    _lmdb._LMDBWrite.delete_blob = die
elif phase == "before-scrub":  # committed, the old bytes still in free pages
    _lmdb.LMDBStore.scrub = die
elif phase == "in-scrub":  # the compact copy is written, not yet renamed over data.mdb
    _lmdb.os.replace = die
with turnlog.open(store) as log:
    log.erase("s", [0, 4], reason="killed")
"""


@pytest.mark.parametrize("phase", ["in-transaction", "before-scrub", "in-scrub"])
def test_sigkill_during_erase_leaves_old_or_new_state_and_a_rerun_completes_it(
    tmp_path: Path, phase: str
) -> None:
    import signal
    import subprocess
    import sys

    store = str(tmp_path / "store")
    with turnlog.open(store) as log:
        conversation(log)
        before = dump(log)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, phase, store], capture_output=True, check=False
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert not (tmp_path / "store" / "scrub.tmp" / "data.mdb").exists() or phase == "in-scrub"
    with turnlog.open(store) as log:
        report = log.verify()
        assert report.ok, report.problem
        kinds = [e.kind for e in log.read(SESSION)]
        if phase == "in-transaction":
            assert dump(log) == before  # the old state
        else:
            assert kinds[0] == "erased" and kinds[-1] == "erasure"  # the new state
        again = log.erase(SESSION, [0, 4], reason="killed")
        assert again.seq in (None, 8)
        assert log.verify().ok
    raw = (tmp_path / "store" / "data.mdb").read_bytes()
    assert SECRET.encode() not in raw and TOOL_SECRET.encode() not in raw
    assert not (tmp_path / "store" / "scrub.tmp").exists()


GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("version", GOLDEN_VERSIONS)
def test_a_store_of_an_earlier_release_erases_verifies_and_replays(
    tmp_path: Path, version: str
) -> None:
    import shutil

    shutil.copytree(GOLDEN / version / "store", tmp_path / "store")
    with turnlog.open(str(tmp_path / "store")) as log:
        session = max(log.sessions(), key=lambda h: h.seq).session
        users = [e.seq for e in log.read(session, kinds=["user"])]
        erased = log.erase(session, [users[0]], reason="upgrade check")
        assert erased.seqs[0] == users[0]
        report = log.verify()
        assert report.ok, report.problem
        results = list(Replayer(Packer(log)).replay_all(session))
        assert results and all(r.ok or r.erased_by == erased.seq for r in results)
        assert any(r.erased_by is not None for r in results)
