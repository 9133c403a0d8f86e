"""Erasure follows erased text into the events derived from it: a memory saved from an
erased summary, the memory block quoting it, a recall that hit an erased message, a
"working memory" section of another session quoting an erased summary. They are erased
in the same transaction (docs/erasure.md, "Derived text"); primary records that happen
to repeat the words are kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import turnlog
from turnlog import Log
from turnlog.events import (
    CompactionCommitted,
    SystemSectionSet,
    UserMessageAdded,
)
from turnlog.memories import MemoryManager, Recaller

from tests.test_erasure import POLICY, SECRET, SESSION, conversation, raw_bytes

QUOTED = "the deploy password of the staging cluster is Correct-Horse-Battery-7"
SUMMARY = f"The user said: {QUOTED}. The agent read the config."
SYSTEM_PROMPT = "You are a careful coding agent. Answer briefly and cite files."


@pytest.fixture(params=["lmdb", "memory"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    location = str(tmp_path / "store") if request.param == "lmdb" else ":memory:"
    with turnlog.open(location) as opened:
        yield opened


def _session_with_summary(log: Log) -> int:
    """SESSION: the conversation, a user message with QUOTED (#8), a compaction covering
    it (#9) whose summary quotes it; returns the compaction's seq."""
    conversation(log)
    log.append(SESSION, UserMessageAdded(text=QUOTED))
    done = log.append(
        SESSION,
        CompactionCommitted(first_seq=0, last_seq=8, covered_digest="0" * 64, summary=SUMMARY),
    )
    return done.last_seq


def _text(log: Log, session: str) -> str:
    return msgspec.json.encode(log.read(session)).decode()


def test_a_memory_saved_from_an_erased_summary_and_the_block_quoting_it_go(log: Log) -> None:
    compaction = _session_with_summary(log)
    memories = MemoryManager(log)
    memories.save_summary(SESSION, compaction)
    memories.save("stack", "the project uses postgres 15")  # derived from nothing erased
    memories.refresh("agent", policy=POLICY)
    assert QUOTED in memories.block_in_force("agent")
    assert QUOTED in memories.render(POLICY)

    erased = log.erase(SESSION, [8], reason="leaked password")
    assert erased.seqs == (8, compaction)
    followed = {e.session: e.seqs for e in erased.followed}
    assert set(followed) == {"memories", "agent"}
    for name in ("memories", "agent", SESSION):
        assert QUOTED not in _text(log, name), name
    # The same manager, in the same process: its fold is rebuilt.
    assert QUOTED not in memories.render(POLICY)
    assert "postgres 15" in memories.render(POLICY)  # the other memory is kept
    assert QUOTED not in memories.block_in_force("agent")
    assert QUOTED.encode() not in raw_bytes(log)
    report = log.verify()
    assert report.ok, report.problem
    assert {s for s, _, _ in report.erased} == {SESSION, "memories", "agent"}


def test_a_working_memory_section_of_another_session_quoting_the_summary_goes(log: Log) -> None:
    _session_with_summary(log)
    log.append(
        "next",
        [
            SystemSectionSet(name="system", text=SYSTEM_PROMPT),
            SystemSectionSet(
                name="Working Memory", text=f"Previous session:\n{SUMMARY}", position=5
            ),
            UserMessageAdded(text=f"as I said before: {QUOTED}"),
        ],
    )
    log.append(
        "other",
        [SystemSectionSet(name="system", text=SYSTEM_PROMPT), UserMessageAdded(text="unrelated")],
    )
    log.append(SESSION, SystemSectionSet(name="system", text=SYSTEM_PROMPT))

    erased = log.erase(SESSION, reason="account deleted")  # the whole session
    assert [(e.session, e.seqs) for e in erased.followed] == [("next", (1,))]
    kinds = [e.kind for e in log.read("next")]
    assert kinds == ["system", "erased", "user", "erasure"]
    # A message repeating the words is a primary record: kept, as is a system prompt
    # the erased session shared with others.
    assert QUOTED in _text(log, "next") and SYSTEM_PROMPT in _text(log, "other")
    assert [e.kind for e in log.read("other")] == ["system", "user"]
    assert log.verify().ok


def test_a_recall_that_hit_an_erased_message_goes_and_recall_finds_nothing_erased(log: Log) -> None:
    conversation(log)
    recaller = Recaller(log)
    assert recaller.search("sk-live-SECRETUSERTEXT-4242")  # indexed, in this process
    log.append("later", UserMessageAdded(text="what was my key?"))
    done = recaller.commit("later", "my key is", policy=POLICY, sessions=[SESSION])
    assert done is not None and SECRET in _text(log, "later")

    erased = log.erase(SESSION, [0], reason="leaked key")
    assert [(e.session, e.seqs) for e in erased.followed] == [("later", (done.last_seq,))]
    assert SECRET not in _text(log, "later")
    hits = recaller.search("my key is", sessions=[SESSION])
    assert all(SECRET not in hit.text for hit in hits)
    assert SECRET.encode() not in raw_bytes(log)
    assert log.verify().ok


def test_nothing_derived_means_nothing_followed(log: Log) -> None:
    conversation(log)
    log.append("other", SystemSectionSet(name="notes", text="unrelated notes on the build"))
    erased = log.erase(SESSION, [0], reason="r")
    assert erased.followed == ()
    assert [e.kind for e in log.read("other")] == ["system"]


def test_the_erase_command_names_the_sessions_followed(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from turnlog.tools.cli import main

    store = str(tmp_path / "store")
    with turnlog.open(store) as log:
        compaction = _session_with_summary(log)
        MemoryManager(log).save_summary(SESSION, compaction)
    assert main(["--store", store, "erase", SESSION, "8", "--reason", "r"]) == 0
    out = capsys.readouterr().out
    assert "memories:" in out and f"{SESSION}:" in out
    assert QUOTED.encode() not in (tmp_path / "store" / "data.mdb").read_bytes()
