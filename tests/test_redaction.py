"""Redaction at the door (turnlog.adapters.redaction): secrets in what a `Session`, an
importer or ``turnlog import`` appends are replaced by placeholders before anything is
stored, the kinds are recorded in the event's meta, and no byte of the secret reaches
the store's files (docs/redaction.md)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import msgspec
import pytest
import turnlog
from turnlog import Draft, Log
from turnlog.adapters import AsyncSession, Session
from turnlog.adapters.importers import import_path
from turnlog.adapters.redaction import META_KEY, RedactionError, Redactor
from turnlog.events import ToolCall, ToolResultAdded, UserMessageAdded
from turnlog.tools.cli import main

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
)
CODEX = (
    CORPUS
    / "codex_rollout_jsonl"
    / "Python-AI-Solutions__agentic-neurodata-conversion"
    / "codex"
    / "sessions"
    / "2025"
    / "09"
    / "26"
    / "rollout-2025-09-26T20-11-25-01998678-c228-73e1-86d1-ff72b4845b64.jsonl"
)
CLAUDE = (
    CORPUS
    / "claude_code_jsonl"
    / "Durban-Designer__vsla"
    / "docs"
    / "history"
    / "raw_sessions"
    / "-home-kenth56-vsla"
    / "069508a5-1193-487c-a9b5-a6f5f3ae4f98.jsonl"
)

# Planted secrets, one of each kind the door must stop (all fake).
AWS = "AKIAZ7QXWERTYUIOP4JK"
GITHUB = "ghp_" + "Zx9" * 12
BEARER = "d1a7f0c2b9e84f5aa3c6e1b07d2f9c4e8b5a"
DB_PASSWORD = "Tr0ub4dor-and-3"
KEY_LINE = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + KEY_LINE
    + "\nVaLSHl9lmkAWNtIQxMOtU0XlvqEWsKHtqMbpTzLhE5Rf0DAQABAoIBAQCi\n"
    "-----END RSA PRIVATE KEY-----"
)
EMPLOYEE = "EMP-731942"
SECRETS = (AWS, GITHUB, BEARER, DB_PASSWORD, KEY_LINE, EMPLOYEE)

USER_TEXT = f"deploy with AWS_ACCESS_KEY_ID={AWS} and token {GITHUB}; I am {EMPLOYEE}"
TOOL_TEXT = (
    f"$ cat .env\nDATABASE_URL=postgresql://app:{DB_PASSWORD}@db.internal:5432/app\n"
    f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.com\n"
    f"$ cat id_rsa\n{PRIVATE_KEY}\n"
)
PATTERNS = {"employee id": r"EMP-[0-9]{6}"}


def redactor() -> Redactor:
    return Redactor(patterns=PATTERNS)


def raw_store(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def assert_no_secret(data: bytes) -> None:
    for secret in SECRETS:
        assert secret.encode() not in data, secret


# -- the scanner ---------------------------------------------------------------------------
def test_every_kind_is_replaced_by_its_placeholder() -> None:
    text, counts = redactor().text(USER_TEXT + "\n" + TOOL_TEXT)
    for secret in SECRETS:
        assert secret not in text
    assert counts == {
        "AWS Access Key": 1,
        "GitHub Token": 1,
        "employee id": 1,
        "Basic Auth Credentials": 1,
        "Bearer Token": 1,
        "Private Key": 1,
    }
    assert "postgresql://app:[redacted: Basic Auth Credentials]@db.internal" in text
    assert "$ cat id_rsa\n[redacted: Private Key]\n" in text  # the whole key block
    assert "I am [redacted: employee id]" in text


def test_a_private_key_in_json_text_and_one_cut_off_go_whole() -> None:
    escaped = json.dumps({"output": PRIVATE_KEY})
    text, counts = redactor().text(escaped)
    assert counts == {"Private Key": 1} and KEY_LINE not in text
    assert json.loads(text) == {"output": "[redacted: Private Key]"}  # still JSON
    cut = PRIVATE_KEY[:90] + "\nthe output was truncated"
    text, _ = redactor().text(cut)
    assert KEY_LINE not in text and text.endswith("\nthe output was truncated")


def test_redaction_is_deterministic_and_idempotent() -> None:
    first = redactor().text(TOOL_TEXT)
    assert redactor().text(TOOL_TEXT) == first
    assert redactor().text(first[0]) == (first[0], {})  # placeholders are left alone


def test_text_without_secrets_and_its_draft_are_unchanged() -> None:
    body = UserMessageAdded(text="a git sha 3f786850e387550fdab836ed7e6dc881de23001b, no key")
    draft = Draft(body=body, meta={"source": "x"})
    assert redactor().draft(draft) is draft  # same bytes, same hash as without a redactor


def test_a_draft_records_the_kinds_never_the_secret() -> None:
    draft = redactor().draft(
        Draft(
            body=ToolResultAdded(call_id="c1", tool_name="bash", output=TOOL_TEXT),
            meta={"raw": {"env": f"AWS={AWS}"}},
        )
    )
    assert draft.meta[META_KEY] == {
        "AWS Access Key": 1,
        "Basic Auth Credentials": 1,
        "Bearer Token": 1,
        "Private Key": 1,
    }
    assert_no_secret(msgspec.json.encode(draft))


def test_a_bad_pattern_or_detector_is_a_specific_error() -> None:
    with pytest.raises(RedactionError, match="not a valid regular expression"):
        Redactor(patterns={"x": "("})
    with pytest.raises(RedactionError, match="not a regular-expression plugin"):
        Redactor(detectors=["NoSuchDetector"])


def test_without_detect_secrets_redaction_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "detect_secrets.core.plugins.util", None)
    with pytest.raises(RedactionError, match="detect-secrets") as caught:
        Redactor()
    assert "turnlog[redact]" in str(caught.value)
    store = tmp_path / "store"
    assert main(["--store", str(store), "import", str(CODEX)]) != 0
    assert "--no-redact" in capsys.readouterr().err
    assert not store.exists()  # nothing written


# -- Session and AsyncSession ---------------------------------------------------------------
def _chat(log: Log, session: Session) -> None:
    session.system("rules", f"the deploy key is {AWS}")
    session.user(USER_TEXT)
    session.prepare()
    session.record(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "bash",
                                    "arguments": json.dumps(
                                        {"cmd": f"psql postgresql://app:{DB_PASSWORD}@db"}
                                    ),
                                },
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )
    # A long output: stored as a blob.
    session.tool_result("call_1", TOOL_TEXT + "row\n" * 30_000)


def test_a_session_with_a_redactor_stores_no_secret(tmp_path: Path) -> None:
    with turnlog.open(str(tmp_path / "store")) as log:
        session = Session(log, "chat", model="gpt-4o-mini", redactor=redactor())
        _chat(log, session)
        # Setting the same section again appends nothing (compared as stored).
        assert session.system("rules", f"the deploy key is {AWS}") is None
        events = log.read("chat")
        assert any(
            e.body.blob is not None
            for e in events  # type: ignore[union-attr]
            if isinstance(e.body, ToolResultAdded)
        )
        kinds = {e.kind: e.meta.get(META_KEY) for e in events if META_KEY in e.meta}
        assert kinds == {
            "system": {"AWS Access Key": 1},
            "user": {"AWS Access Key": 1, "GitHub Token": 1, "employee id": 1},
            "assistant": {"Basic Auth Credentials": 1},
            "tool_result": {"Basic Auth Credentials": 1, "Bearer Token": 1, "Private Key": 1},
        }
        call = next(
            p
            for e in events
            if e.kind == "assistant"
            for p in e.body.parts  # type: ignore[union-attr]
            if isinstance(p, ToolCall)
        )  # type: ignore[union-attr]
        assert json.loads(call.arguments)["cmd"].startswith("psql postgresql://app:[redacted")
        body = session.prepare().body
        assert_no_secret(body)
        assert log.verify().ok
    assert_no_secret(raw_store(tmp_path / "store"))


def test_a_session_without_a_redactor_keeps_the_text(tmp_path: Path) -> None:
    # What the test above guards against: the secrets do reach the file without it.
    with turnlog.open(str(tmp_path / "store")) as log:
        _chat(log, Session(log, "chat", model="gpt-4o-mini"))
    data = raw_store(tmp_path / "store")
    assert AWS.encode() in data and KEY_LINE.encode() in data


def test_an_async_session_redacts_the_same_way(tmp_path: Path) -> None:
    async def run(log: Log) -> None:
        session = AsyncSession(log, "chat", model="gpt-4o-mini", redactor=redactor())
        await session.user(USER_TEXT, key="u1")
        await session.user(USER_TEXT, key="u1")  # a retry: the same redacted bytes

    with turnlog.open(str(tmp_path / "store")) as log:
        asyncio.run(run(log))
        events = log.read("chat")
        assert len(events) == 1
        assert events[0].meta[META_KEY] == {
            "AWS Access Key": 1,
            "GitHub Token": 1,
            "employee id": 1,
        }
    assert_no_secret(raw_store(tmp_path / "store"))


# -- importers and `turnlog import` on real transcripts with planted secrets ---------------
def _plant_codex(tmp_path: Path) -> Path:
    if not CODEX.exists():
        pytest.skip("needs ../shared/corpus (see README: Tests)")
    lines = CODEX.read_text().splitlines()
    user = output = False
    for i, line in enumerate(lines):
        record = json.loads(line)
        payload = record.get("payload") or {}
        if (
            not user
            and payload.get("type") == "message"
            and payload.get("role") == "user"
            and payload["content"][0]["text"].startswith("# Context")
        ):
            payload["content"][0]["text"] += "\n" + USER_TEXT
            user = True
        elif not output and payload.get("type") == "function_call_output":
            inner = json.loads(payload["output"])
            inner["output"] = TOOL_TEXT + inner["output"]
            payload["output"] = json.dumps(inner)
            output = True
        lines[i] = json.dumps(record)
    assert user and output
    planted = tmp_path / "transcripts" / CODEX.name
    planted.parent.mkdir()
    planted.write_text("\n".join(lines) + "\n")
    return planted


def _plant_claude(tmp_path: Path) -> Path:
    if not CLAUDE.exists():
        pytest.skip("needs ../shared/corpus (see README: Tests)")
    lines = CLAUDE.read_text().splitlines()
    user = output = False
    for i, line in enumerate(lines):
        record = json.loads(line)
        content = (record.get("message") or {}).get("content")
        if not user and record.get("type") == "user" and isinstance(content, str):
            record["message"]["content"] = content + "\n" + USER_TEXT
            user = True
        elif (
            not output
            and isinstance(content, list)
            and content
            and content[0].get("type") == "tool_result"
        ):
            content[0]["content"] = TOOL_TEXT + "x\n" * 40_000 + str(content[0]["content"])
            output = True
        lines[i] = json.dumps(record)
    assert user and output
    planted = tmp_path / "claude" / CLAUDE.name
    planted.parent.mkdir()
    planted.write_text("\n".join(lines) + "\n")
    return planted


def test_turnlog_import_redacts_by_default_and_a_second_import_appends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = _plant_codex(tmp_path)
    store = tmp_path / "store"
    args = [
        "--store",
        str(store),
        "import",
        str(planted),
        "--redact-pattern",
        "employee id=EMP-[0-9]{6}",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "redacted 1 AWS Access Key" in out and "1 Private Key" in out
    assert_no_secret(raw_store(store))
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["appended"] == 0 and result["redacted"]["Bearer Token"] == 1
    with turnlog.open(str(store)) as log:
        assert log.verify().ok
        session = log.sessions()[0].session
        text = msgspec.json.encode(log.read(session)).decode()
        assert "[redacted: Private Key]" in text and "[redacted: employee id]" in text
    # --no-redact keeps the text (so the checks above can fail).
    kept = tmp_path / "kept"
    assert main(["--store", str(kept), "import", str(planted), "--no-redact"]) == 0
    assert AWS.encode() in raw_store(kept) and KEY_LINE.encode() in raw_store(kept)


def test_import_path_with_a_redactor_redacts_a_claude_code_transcript(tmp_path: Path) -> None:
    planted = _plant_claude(tmp_path)
    with turnlog.open(str(tmp_path / "store")) as log:
        summary = import_path(log, planted.parent, redactor=redactor())
        assert summary.redacted == {
            "AWS Access Key": 1,
            "Basic Auth Credentials": 1,
            "Bearer Token": 1,
            "GitHub Token": 1,
            "Private Key": 1,
            "employee id": 1,
        }
        assert summary.blobs >= 1  # the long tool output went to a blob, redacted
        again = import_path(log, planted.parent, redactor=redactor())
        assert again.appended == 0 and again.redacted == summary.redacted
        assert log.verify().ok
    assert_no_secret(raw_store(tmp_path / "store"))
    # Without a redactor (the API's default) the text is kept as it is.
    with turnlog.open(str(tmp_path / "plain")) as log:
        assert import_path(log, planted.parent).redacted == {}
    assert AWS.encode() in raw_store(tmp_path / "plain")


def test_turnlog_import_counts_redactions_of_a_kind_in_the_plural(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "redacted 4 Private Key"."""
    lines = [
        json.dumps(
            {
                "type": "user",
                "sessionId": "s1",
                "uuid": f"u{i}",
                "message": {"role": "user", "content": f"EMP-00000{i} and DEV-00000{i}"},
            }
        )
        for i in range(2)
    ]
    source = tmp_path / "chat.jsonl"
    source.write_text("\n".join(lines) + "\n")
    patterns = ["employee id=EMP-[0-9]{6}", "device ids=DEV-[0-9]{6}", "badge=BADGE-[0-9]+"]
    argv = ["--store", str(tmp_path / "store"), "import", str(source)]
    assert main([*argv, *(x for p in patterns for x in ("--redact-pattern", p))]) == 0
    assert "redacted 2 device ids, 2 employee ids (replaced" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("NOEQ", "--redact-pattern takes KIND=REGEX, found 'NOEQ'"),
        ("tok=([", "--redact-pattern 'tok=([': REGEX is not a valid regular expression"),
        ("a]b=x", "--redact-pattern 'a]b=x': KIND is a name without ']'"),
    ],
)
def test_a_malformed_redact_pattern_is_a_usage_error_that_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pattern: str, message: str
) -> None:
    source = tmp_path / "chat.jsonl"
    source.write_text(
        '{"type": "user", "sessionId": "s1", "uuid": "u1", '
        '"message": {"role": "user", "content": "hi"}}\n'
    )
    store = tmp_path / "store"
    argv = ["--store", str(store), "import", str(source), "--redact-pattern", pattern]
    assert main(argv) == 2  # a bad argument, as docs/cli.md's exit codes say (it was 3)
    assert message in capsys.readouterr().err
    assert not store.exists()
