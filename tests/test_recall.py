"""Recall: BM25 ranking, what is indexed, incremental indexing, rewinds, fusion, commits."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import turnlog
from hypothesis import event, given
from hypothesis import strategies as st
from turnlog import Packer, Policy
from turnlog._recall import CHUNK_CHARS, capped_hits, chunks, tokenize
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    MemoryChanged,
    NotificationAdded,
    RecallAdded,
    RecallHit,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
    covered_digest,
)
from turnlog.memories import Recaller
from turnlog.packing import get_counter


@pytest.fixture
def log(tmp_path: Path) -> Iterator[turnlog.Log]:
    """A fresh LMDB log under ``tmp_path``."""
    opened = turnlog.open(tmp_path / "s")
    yield opened
    opened.close()


def say(log: turnlog.Log, session: str, *texts: str) -> None:
    """Alternate user and assistant messages."""
    for i, text in enumerate(texts):
        if i % 2 == 0:
            log.append(session, UserMessageAdded(text=text))
        else:
            log.append(session, AssistantMessageAdded(parts=(TextPart(text=text),)))


def prompt_text(log: turnlog.Log, session: str, seq: int, policy: Policy) -> tuple[str, str]:
    """The text of the message the event ``session#seq`` became, and its packing decision."""
    packed = Packer(log).pack(session, policy=policy)
    [message] = [m for m in packed.prompt.messages if m.source == (seq,)]
    [decision] = [d for d in packed.decisions if d.seq == seq]
    return message.text, decision.decision


def keys(hits: Sequence[RecallHit]) -> list[tuple[str, int]]:
    return [(h.session, h.seq) for h in hits]


def test_tokens_are_lowercase_runs_of_letters_and_digits() -> None:
    assert tokenize("Set pool_size=20 in DB.toml; Größe!") == [
        "set",
        "pool",
        "size",
        "20",
        "in",
        "db",
        "toml",
        "größe",
    ]


# -- ranking ----------------------------------------------------------------------------
CORPUS = [
    "the postgres connection pool is exhausted",
    "restart the web server after deploy",
    "postgres postgres postgres tuning guide for the pool",
    "unrelated note about lunch",
    "the pool party is on friday and the weather is nice and the music is loud and long",
]


def bm25(query: str, docs: list[str]) -> list[float]:
    """Textbook BM25 (k1 = 1.2, b = 0.75), straight from the formula."""
    tokenized = [tokenize(d) for d in docs]
    n = len(docs)
    avgdl = sum(len(t) for t in tokenized) / n
    out = []
    for toks in tokenized:
        score = 0.0
        for term in dict.fromkeys(tokenize(query)):
            df = sum(term in t for t in tokenized)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = toks.count(term)
            score += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * len(toks) / avgdl))
        out.append(score)
    return out


def test_bm25_scores_match_the_formula_and_rank_sensibly(log: turnlog.Log) -> None:
    for text in CORPUS:
        log.append("past", UserMessageAdded(text=text))
    hits = Recaller(log).search("postgres pool", k=10)
    expected = bm25("postgres pool", CORPUS)
    assert [h.score for h in hits] == [f"{expected[h.seq]:.6f}" for h in hits]
    assert [h.seq for h in hits] == [2, 0, 4]  # repeated rare term, then both, then long doc
    assert all(float(h.score) > 0 for h in hits)
    # A rare term outweighs a common one; a short document outweighs a long one.
    assert [h.seq for h in Recaller(log).search("pool", k=10)] == [0, 2, 4]
    assert [h.seq for h in Recaller(log).search("lunch party", k=1)] == [3]
    assert Recaller(log).search("kubernetes") == []
    assert Recaller(log).search("") == []


def test_ties_are_broken_by_session_then_seq(log: turnlog.Log) -> None:
    for session in ("b", "a", "c"):
        log.append(session, UserMessageAdded(text="filler"))
        log.append(session, UserMessageAdded(text="identical words here"))
    hits = Recaller(log).search("identical", k=10)
    assert keys(hits) == [("a", 1), ("b", 1), ("c", 1)]
    assert len({h.score for h in hits}) == 1


def test_sessions_and_exclude_session_limit_the_search(log: turnlog.Log) -> None:
    for session in ("a", "b", "c"):
        log.append(session, UserMessageAdded(text=f"shared topic from {session}"))
    recaller = Recaller(log)
    assert [h.session for h in recaller.search("shared", k=10)] == ["a", "b", "c"]
    assert [h.session for h in recaller.search("shared", sessions=["c", "a"])] == ["a", "c"]
    assert [h.session for h in recaller.search("shared", exclude_session="b")] == ["a", "c"]
    assert [h.session for h in recaller.search("shared", k=1)] == ["a"]
    assert recaller.search("shared", k=0) == []


def test_only_conversation_text_is_indexed_never_summaries_or_recalls(log: turnlog.Log) -> None:
    log.append(
        "s",
        [
            UserMessageAdded(text="user says alpha"),
            AssistantMessageAdded(
                parts=(
                    TextPart(text="assistant says bravo"),
                    ToolCall(id="c1", name="Bash", arguments='{"cmd": "zulu"}'),
                )
            ),
            ToolResultAdded(call_id="c1", tool_name="Bash", output="tool says charlie"),
            NotificationAdded(source="ci", text="notification says delta"),
            SystemSectionSet(name="base", text="system says echo"),
            RecallAdded(
                query="q", hits=(RecallHit(session="x", seq=0, text="recall says foxtrot"),)
            ),
            MemoryChanged(op="save", memory_id="m", content="memory says golf"),
        ],
    )
    hashes = [e.hash for e in log.read("s", 0, 2)]
    log.append(
        "s",
        CompactionCommitted(
            first_seq=0,
            last_seq=1,
            covered_digest=covered_digest(hashes),
            summary="summary says hotel",
        ),
    )
    recaller = Recaller(log)
    for word, seq in (("alpha", 0), ("bravo", 1), ("charlie", 2), ("delta", 3)):
        assert keys(recaller.search(word)) == [("s", seq)], word
    for word in ("echo", "foxtrot", "golf", "hotel", "zulu"):
        assert recaller.search(word) == [], word


def test_the_index_is_incremental(log: turnlog.Log) -> None:
    recaller = Recaller(log)
    say(log, "a", "first message about kiwi", "reply")
    assert recaller.index() == 2
    assert recaller.index() == 0
    say(log, "a", "second message about kiwi")
    say(log, "b", "kiwi in another session")
    assert keys(recaller.search("kiwi", k=10)) == [("a", 0), ("a", 2), ("b", 0)]
    assert recaller.index() == 0


def test_rewound_events_are_not_searched_until_a_rewind_brings_them_back(log: turnlog.Log) -> None:
    say(log, "s", "keep apple", "reply", "drop apple", "reply")  # 0..3
    recaller = Recaller(log)
    assert keys(recaller.search("apple")) == [("s", 0), ("s", 2)]
    log.append("s", SessionRewound(to_seq=1))  # 4: seqs 2, 3 leave the view
    assert keys(recaller.search("apple")) == [("s", 0)]
    assert keys(Recaller(log).search("apple")) == [("s", 0)]
    log.append("s", UserMessageAdded(text="new apple"))  # 5
    log.append("s", SessionRewound(to_seq=3))  # 6: back to right after 3
    assert keys(recaller.search("apple")) == [("s", 0), ("s", 2)]
    assert keys(Recaller(log).search("apple")) == [("s", 0), ("s", 2)]


def test_long_texts_are_cut_to_a_snippet_around_the_first_match(log: turnlog.Log) -> None:
    text = (
        " ".join(f"word{i}" for i in range(400))
        + " needle "
        + " ".join(f"tail{i}" for i in range(400))
    )
    log.append("s", ToolResultAdded(call_id="c", tool_name="Read", output=text))
    [hit] = Recaller(log, snippet_chars=200).search("needle")
    assert len(hit.text) <= 200
    assert "needle" in hit.text
    assert hit.text.startswith("...") and hit.text.endswith("...")


# -- fusion with an embedding ----------------------------------------------------------------
GROUPS = (
    ("car", "automobile", "vehicle", "truck"),
    ("fruit", "apple", "banana"),
    ("music", "song", "guitar"),
)


def tiny_embed(text: str) -> list[float]:
    """A deterministic 'embedding': counts of words of a few synonym groups."""
    words = tokenize(text)
    return [float(sum(w in group for w in words)) for group in GROUPS]


def test_an_embedding_is_fused_with_bm25_by_reciprocal_rank(log: turnlog.Log) -> None:
    say(
        log,
        "s",
        "my car broke down",
        "buy some banana bread",
        "the automobile dealer called",
        "guitar lessons on monday",
    )
    plain = Recaller(log)
    assert keys(plain.search("automobile")) == [("s", 2)]
    fused = Recaller(log, embed=tiny_embed)
    hits = fused.search("automobile")
    assert keys(hits) == [("s", 2), ("s", 0)]  # the synonym is found by the embedding
    # Both car documents have cosine 1 (the tie goes to seq 0): ranks 2 and 1 there.
    assert hits[0].score == f"{1 / 61 + 1 / 62:.6f}" and hits[1].score == f"{1 / 61:.6f}"
    assert fused.searcher == "bm25+embed:rrf"
    assert fused.commit("other", "automobile", policy=Policy(), sessions=["s"]) is not None
    [event] = log.read("other")
    assert isinstance(event.body, RecallAdded) and event.body.searcher == "bm25+embed:rrf"


# -- commits ----------------------------------------------------------------------------------
def test_commit_appends_a_recall_event_and_nothing_when_there_is_no_hit(log: turnlog.Log) -> None:
    say(log, "past", "we chose sqlite for the cache", "ok")
    say(log, "agent", "what did we choose for the cache?")
    recaller = Recaller(log)
    assert recaller.commit("agent", "kubernetes", policy=Policy()) is None
    assert log.head("agent").seq == 0  # type: ignore[union-attr]
    done = recaller.commit("agent", "sqlite cache", policy=Policy(), time=7)
    assert done is not None and (done.session, done.first_seq) == ("agent", 1)
    event = log.get("agent", 1)
    body = event.body
    assert event.time == 7 and isinstance(body, RecallAdded)
    assert body == RecallAdded(
        query="sqlite cache",
        hits=(
            RecallHit(
                session="past",
                seq=0,
                text="we chose sqlite for the cache",
                score=body.hits[0].score,
            ),
        ),
        searcher="bm25",
    )
    # By default the agent's own session is not searched (it asked the question).
    assert all(h.session != "agent" for h in body.hits)


def test_committed_hits_are_capped_by_chars_and_tokens(log: turnlog.Log) -> None:
    for i in range(12):
        log.append("past", UserMessageAdded(text=f"release notes {i}: " + "details " * 120))
    recaller = Recaller(log)
    counter = get_counter("cl100k_base")
    for policy in (
        Policy(),
        Policy(recall_max_chars=1_500),
        Policy(recall_max_tokens=300),
        Policy(recall_max_chars=700, recall_max_tokens=10_000),
    ):
        done = recaller.commit("agent", "release notes", policy=policy, k=12)
        assert done is not None
        body = log.get("agent", done.first_seq).body
        assert isinstance(body, RecallAdded)
        text, decision = prompt_text(log, "agent", done.first_seq, policy)
        assert len(text) <= policy.recall_max_chars
        assert counter.count(text) <= policy.recall_max_tokens
        assert decision == "verbatim"  # the packer finds nothing more to cut
        assert all(len(h.text) <= 800 and h.text in text for h in body.hits)
        assert body.hits[-1].text.endswith(" [...]") or len(body.hits) == 12
    assert Policy().recall_max_chars == 4_000


def test_capped_hits_never_exceed_the_caps_even_for_a_tiny_budget(log: turnlog.Log) -> None:
    hits = [RecallHit(session="s", seq=i, text="lorem ipsum " * 50) for i in range(3)]
    assert capped_hits("q", hits, Policy(recall_max_chars=30)) == []
    policy = Policy(recall_max_chars=200)
    kept = capped_hits("q", hits, policy)
    assert len(kept) == 1 and kept[0].text.endswith(" [...]")
    log.append("agent", RecallAdded(query="q", hits=tuple(kept)))
    text, decision = prompt_text(log, "agent", 0, policy)
    assert len(text) <= 200 and decision == "verbatim"


PAST = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor"]
AGENT = ["kettle", "lantern", "meadow", "nickel"]


@given(
    past=st.lists(st.lists(st.sampled_from(PAST), min_size=1, max_size=12), min_size=1, max_size=8),
    agent=st.lists(
        st.lists(st.sampled_from(AGENT), min_size=1, max_size=6), min_size=1, max_size=4
    ),
    query=st.lists(st.sampled_from(PAST), min_size=1, max_size=3),
    max_chars=st.integers(0, 600),
)
def test_search_results_reach_a_prompt_only_through_a_committed_recall(
    past: list[list[str]], agent: list[list[str]], query: list[str], max_chars: int
) -> None:
    policy = Policy(recall_max_chars=max_chars)
    with tempfile.TemporaryDirectory() as tmp, turnlog.open(Path(tmp) / "s") as log:
        for i, words in enumerate(past):
            say(log, f"past{i % 3}", f"p{i} " + " ".join(words))
        for words in agent:
            say(log, "agent", " ".join(words))
        recaller = Recaller(log)
        packer = Packer(log)
        hits = recaller.search(" ".join(query), exclude_session="agent")
        prompt = packer.pack("agent", policy=policy).prompt
        shown = prompt.encode()
        for hit in hits:  # searching put nothing into the prompt
            assert hit.text.encode() not in shown
        assert not any(w.encode() in shown for w in PAST)
        done = recaller.commit("agent", " ".join(query), policy=policy)
        event("committed" if done is not None else "nothing committed")
        packed = packer.pack("agent", policy=policy)
        events = log.lineage("agent")
        for message in packed.prompt.messages:
            if any(w in message.text for w in PAST):  # past text only via the recall event
                assert message.text.startswith("<recall query=")
                assert all(isinstance(events[p].body, RecallAdded) for p in message.source)
                assert len(message.text) <= max_chars
        if done is None:
            assert packed.prompt == prompt or packed.prompt.messages == prompt.messages
            assert not any(w.encode() in packed.prompt.encode() for w in PAST)
        else:
            body = log.get("agent", done.first_seq).body
            assert isinstance(body, RecallAdded) and body.hits
            [message] = [m for m in packed.prompt.messages if m.text.startswith("<recall")]
            for hit in body.hits:
                assert hit.text in message.text


SCRIPT = """
import json, sys, turnlog
from turnlog.memories import Recaller
log = turnlog.open(":memory:")
words = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor"]
for i in range(60):
    text = " ".join(words[(i * j + i) % len(words)] for j in range(1 + i % 7))
    log.append(f"s{(i * 7) % 5}", turnlog.events.UserMessageAdded(text=text))
def embed(text):
    return [float(text.count(w)) for w in words[:4]]
out = []
for query in ("amber cobalt", "harbor", "dune ember fjord", "garnet amber basalt"):
    for recaller in (Recaller(log), Recaller(log, embed=embed)):
        out.append([(h.session, h.seq, h.score, h.text)
                    for h in recaller.search(query, k=8)])
print(json.dumps(out))
"""


def test_ranking_does_not_depend_on_the_hash_seed() -> None:
    results = set()
    for seed in ("0", "1", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
        )
        results.add(done.stdout)
    assert len(results) == 1
    assert len(json.loads(results.pop())[0]) == 8


# -- chunks ----------------------------------------------------------------------------------
@given(text=st.text(alphabet=st.sampled_from("ab \n"), max_size=3_000), size=st.integers(256, 900))
def test_chunks_cover_the_text_in_order_and_within_the_size(text: str, size: int) -> None:
    cut = chunks(text, size)
    assert "".join(piece for _, piece in cut) == text
    assert all(len(piece) <= size for _, piece in cut)
    assert [offset for offset, _ in cut] == [
        sum(len(p) for _, p in cut[:i]) for i in range(len(cut))
    ]


def test_a_long_output_is_searched_in_chunks_and_each_hit_says_where_it_is() -> None:
    lines = [f"row {n:06d} all fine here" for n in range(12_000)]
    for n in (3_000, 9_000):
        lines[n] = f"row {n:06d} the SIDEHILL sensor tripped"
    output = "\n".join(lines)
    assert len(output) > 50 * CHUNK_CHARS
    log = turnlog.open(":memory:")
    log.append("a", UserMessageAdded(text="check the sensors"))
    log.append("a", AssistantMessageAdded(parts=(ToolCall(id="c", name="Bash"),)))
    seq = log.append("a", ToolResultAdded(call_id="c", tool_name="Bash", output=output)).last_seq
    log.append("a", UserMessageAdded(text="the sidehill one is known to be flaky"))
    hits = Recaller(log, snippet_chars=200).search("sidehill sensor", k=5)
    chunked = [h for h in hits if h.seq == seq]
    assert len(chunked) == 2  # one per chunk that holds it, ranked on its own
    for hit, n in zip(sorted(chunked, key=lambda h: h.offset), (3_000, 9_000), strict=True):
        where = output.index(f"row {n:06d} the SIDEHILL")
        assert hit.offset <= where < hit.offset + len(hit.text)
        assert output[hit.offset :].startswith(hit.text.removeprefix("...").removesuffix("..."))
    # a chunk is scored like a short document: the output's hits outrank the short message
    assert hits[0].seq == seq
    assert Recaller(log, snippet_chars=200).search("sidehill sensor", k=1) == hits[:1]


def test_a_committed_hit_shows_its_offset_in_the_prompt() -> None:
    lines = [f"row {n:06d} all fine here" for n in range(12_000)]
    lines[6_000] = "row 006000 the SIDEHILL sensor tripped"
    log = turnlog.open(":memory:")
    log.append("a", UserMessageAdded(text="check"))
    log.append("a", AssistantMessageAdded(parts=(ToolCall(id="c", name="Bash"),)))
    log.append("a", ToolResultAdded(call_id="c", tool_name="Bash", output="\n".join(lines)))
    log.append("b", UserMessageAdded(text="what tripped?"))
    done = Recaller(log).commit("b", "sidehill", policy=Policy())
    assert done is not None
    body = log.get("b", done.last_seq).body
    assert isinstance(body, RecallAdded) and body.hits[0].offset > 0
    packed = Packer(log).pack("b", policy=Policy())
    text = "\n".join(m.text for m in packed.prompt.messages)
    assert f'seq="2" offset="{body.hits[0].offset}">' in text
    # a hit without an offset renders as hits always did
    old = RecallAdded(query="q", hits=(RecallHit(session="a", seq=0, text="t"),))
    log.append("b", old)
    packed = Packer(log).pack("b", policy=Policy())
    assert '<hit session="a" seq="0">\nt\n</hit>' in "\n".join(
        m.text for m in packed.prompt.messages
    )
