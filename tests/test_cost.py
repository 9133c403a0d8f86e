"""What recorded requests cost: `Replayer.cost` and ``turnlog cost`` (input, cache-write and
cache-read tokens by the provider's cache rules, beside the usage the provider reported)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import turnlog
from turnlog import Packer, Replayer
from turnlog.adapters.providers import CACHE_RULES
from turnlog.events import (
    AssistantMessageAdded,
    ResponseReceived,
    SystemSectionSet,
    TextPart,
    ToolSpec,
    ToolsSet,
    Usage,
    UserMessageAdded,
)
from turnlog.replay import BREAKPOINT_CACHE, PREFIX_CACHE, CacheRule, SessionCost
from turnlog.tools import demo
from turnlog.tools.cli import main

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
)
TRANSCRIPT = (
    CORPUS
    / "claude_code_jsonl/M-Thisness__M-Claude/Archives"
    / "93a38075-1e1b-4210-978f-8e927e43b55b.jsonl"
)

SESSION = "s"
#: A system prompt well above the caches' minimum of 1,024 tokens.
SYSTEM = " ".join(f"rule{i} keep the answer short and exact." for i in range(300))


def session_log() -> turnlog.Log:
    log = turnlog.open(":memory:")
    log.append(
        SESSION,
        [
            SystemSectionSet(name="base", text=SYSTEM),
            ToolsSet(
                tools=(
                    ToolSpec(
                        name="run", description="run a command", parameters='{"type": "object"}'
                    ),
                )
            ),
            UserMessageAdded(text="What is in the repository?"),
        ],
    )
    return log


def turn(log: turnlog.Log, n: int) -> None:
    log.append(
        SESSION,
        [
            AssistantMessageAdded(parts=(TextPart(text=f"Answer {n}."),)),
            UserMessageAdded(text=f"Question {n}?"),
        ],
    )


def record(replayer: Replayer, fmt: str = "anthropic", model: str = "m") -> int:
    return replayer.record(SESSION, format=fmt, model=model).request_seq


def cost(replayer: Replayer) -> SessionCost:
    return replayer.cost(SESSION, caching=CACHE_RULES)


# -- the rules -----------------------------------------------------------------------------


def test_a_request_that_appends_reads_what_the_previous_one_wrote_at_its_breakpoints() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    record(replayer)
    turn(log, 1)
    record(replayer)
    first, second = cost(replayer).requests
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 1024
    # The second repeats the first up to its last breakpoint (its latest message).
    assert second.cache_read_tokens == first.cache_write_tokens
    assert second.cache_write_tokens > 0  # the turn appended, up to its own last breakpoint
    for row in (first, second):
        assert row.input_tokens + row.cache_write_tokens + row.cache_read_tokens == row.tokens
        assert row.price == pytest.approx(
            (row.input_tokens * 3.0 + row.cache_write_tokens * 3.75 + row.cache_read_tokens * 0.30)
            / 1e6
        )


def test_prefix_caching_reads_in_steps_of_128_past_1024_and_bills_no_writes() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    record(replayer, "openai-chat")
    turn(log, 1)
    record(replayer, "openai-chat")
    first, second = cost(replayer).requests
    assert first.cache_read_tokens == 0
    assert first.cache_write_tokens == second.cache_write_tokens == 0
    assert second.cache_read_tokens % 128 == 0 and second.cache_read_tokens >= 1024
    # Everything the second repeats, rounded down to a step of 128 (framing tokens aside).
    assert first.tokens - 128 - 16 < second.cache_read_tokens <= first.tokens
    assert second.input_tokens == second.tokens - second.cache_read_tokens


def test_a_cache_is_per_format_and_model() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    record(replayer, "anthropic")
    record(replayer, "openai-chat")
    record(replayer, "anthropic", model="other")
    record(replayer, "anthropic")
    rows = cost(replayer).requests
    assert [r.cache_read_tokens > 0 for r in rows] == [False, False, False, True]


def test_a_cached_prefix_is_found_only_within_the_lookback_of_a_breakpoint() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    record(replayer)
    for n in range(12):  # 24 messages: the last breakpoint is more than 20 blocks on
        turn(log, n)
    record(replayer)
    first, second = cost(replayer).requests
    static = first.cache_write_tokens
    assert 0 < second.cache_read_tokens < static  # only the system prompt and tools
    wide = replayer.cost(SESSION, default=CacheRule(lookback=40)).requests[1]
    assert wide.cache_read_tokens == static


def test_prompts_below_the_minimum_are_not_cached() -> None:
    log = turnlog.open(":memory:")
    log.append(
        SESSION, [SystemSectionSet(name="base", text="Be brief."), UserMessageAdded(text="hi")]
    )
    replayer = Replayer(Packer(log))
    record(replayer)
    record(replayer)
    for rule in (BREAKPOINT_CACHE, PREFIX_CACHE):
        rows = replayer.cost(SESSION, default=rule).requests
        assert all(r.cache_read_tokens == r.cache_write_tokens == 0 for r in rows)
        assert all(r.input_tokens == r.tokens for r in rows)


def test_reported_usage_stands_beside_the_estimate_priced_the_same_way() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    seq = record(replayer)
    unanswered = record(replayer)
    usage = Usage(
        input_tokens=5000, output_tokens=40, cache_read_tokens=3000, cache_write_tokens=1500
    )
    log.append(SESSION, ResponseReceived(request_seq=seq, usage=usage))
    rows = cost(replayer)
    answered, other = rows.requests
    assert answered.request_seq == seq and other.request_seq == unanswered
    assert answered.reported == usage and other.reported is None
    assert answered.reported_price == pytest.approx((500 * 3.0 + 1500 * 3.75 + 3000 * 0.3) / 1e6)
    assert rows.total.reported_requests == 1 and rows.total.reported == usage


def test_the_prices_are_the_policy_the_request_was_packed_under() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    record(replayer)
    cheap = turnlog.Policy(input_price=1.0, cache_write_price=2.0, cache_read_price=0.1)
    replayer.record(SESSION, policy=cheap, format="anthropic", model="m")
    first, second = cost(replayer).requests
    assert first.prices == {"input": 3.0, "cache_write": 3.75, "cache_read": 0.30}
    assert second.prices == {"input": 1.0, "cache_write": 2.0, "cache_read": 0.1}


def test_a_request_holding_erased_content_has_a_note_and_no_estimate() -> None:
    log = session_log()
    replayer = Replayer(Packer(log))
    record(replayer)
    log.erase(SESSION, [2], reason="test")
    rows = Replayer(Packer(log)).cost(SESSION)
    assert "erased" in rows.requests[0].note and rows.requests[0].tokens == 0
    assert rows.total.requests == 0 and rows.total.tokens == 0


def test_cost_of_an_unknown_session_names_it() -> None:
    with pytest.raises(turnlog.errors.UnknownSessionError, match="'nope'"):
        Replayer(Packer(session_log())).cost("nope")


def test_a_cache_rule_refuses_a_bad_argument() -> None:
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="increment"):
        CacheRule(increment=0)


# -- the command ---------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cost") / "store"
    assert main(["--store", str(path), "demo"]) == 0
    return path


ROW_KEYS = {
    "request_seq",
    "format",
    "model",
    "estimated",
    "note",
    "tokens",
    "input_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "price",
    "prices",
    "reported",
    "reported_price",
}
TOTAL_KEYS = {
    "requests",
    "tokens",
    "input_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "price",
    "cached_share",
    "reported_requests",
    "reported",
    "reported_price",
}


def test_cost_of_the_demo_prints_a_row_per_request_and_the_totals(
    capsys: pytest.CaptureFixture[str], demo_store: Path
) -> None:
    code, out, err = run(capsys, "--store", str(demo_store), "cost", demo.DEFAULT_SESSION)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["REQ", "FORMAT", "TOKENS", "INPUT"]
    with turnlog.open(demo_store, readonly=True) as log:
        requests = [e.seq for e in log.read(demo.DEFAULT_SESSION, kinds=["request"])]
    assert [int(line.split()[0]) for line in lines[1 : 1 + len(requests)]] == requests
    assert lines[1 + len(requests)].startswith(f"total: {len(requests)} requests, ")
    assert lines[2 + len(requests)].startswith("reported by the provider for ")


def test_cost_json_is_the_documented_document(
    capsys: pytest.CaptureFixture[str], demo_store: Path
) -> None:
    code, out, _ = run(capsys, "--store", str(demo_store), "cost", "demo", "--json")
    doc = json.loads(out)
    assert code == 0 and set(doc) == {"session", "requests", "total"}
    assert doc["session"] == demo.DEFAULT_SESSION
    assert all(set(row) == ROW_KEYS for row in doc["requests"])
    assert set(doc["total"]) == TOTAL_KEYS
    reported = [row for row in doc["requests"] if row["reported"] is not None]
    assert reported and doc["total"]["reported_requests"] == len(reported)
    # The demo reports the packed prompt's tokens as the provider's input: the re-packed
    # prompts are the recorded ones.
    assert all(row["reported"]["input_tokens"] == row["tokens"] for row in reported)
    assert doc["total"]["tokens"] == sum(row["tokens"] for row in doc["requests"])
    assert doc["total"]["cache_read_tokens"] > 0


def test_cost_of_an_unknown_session_says_which_one_was_meant(
    capsys: pytest.CaptureFixture[str], demo_store: Path
) -> None:
    code, out, err = run(capsys, "--store", str(demo_store), "cost", "dmeo")
    assert code == 3 and out == ""
    assert "no session 'dmeo'" in err and "did you mean 'demo'" in err


@pytest.mark.skipif(not TRANSCRIPT.is_file(), reason=f"no corpus at {CORPUS}")
def test_cost_of_a_corpus_import_before_and_after_recording(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    assert main(["--store", store, "import", str(TRANSCRIPT), "--json"]) == 0
    session = json.loads(capsys.readouterr().out.splitlines()[-1])["sessions"][0]
    code, out, err = run(capsys, "--store", store, "cost", session)
    assert code == 0 and err == ""
    assert out.startswith(f"{session}: no recorded requests to price")
    assert f"turnlog pack {session} --record" in out
    code, out, _ = run(capsys, "--store", store, "cost", session, "--json")
    empty = json.loads(out)
    assert empty["requests"] == [] and empty["total"]["requests"] == 0
    for _ in range(2):
        code, _, _ = run(
            capsys,
            "--store",
            store,
            "pack",
            session,
            "--record",
            "--budget",
            "32000",
            "--format",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
        )
        assert code == 0
    code, out, _ = run(capsys, "--store", store, "cost", session[:8], "--json")
    first, second = json.loads(out)["requests"]
    assert first["format"] == second["format"] == "anthropic"
    assert first["cache_read_tokens"] == 0 and first["cache_write_tokens"] > 0
    # The same prompt again: all of it up to the last breakpoint comes from the cache.
    assert second["cache_read_tokens"] == first["cache_write_tokens"]
    assert second["cache_write_tokens"] == 0
    assert second["reported"] is None  # no provider was called
    code, out, _ = run(capsys, "--store", store, "cost", session)
    assert "no response recorded the provider's usage for these requests" in out
