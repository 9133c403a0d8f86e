"""Write a golden store with the installed turnlog, through its command line.

Run once per release, with that release installed, into a folder named after it:

    python tests/golden/make_golden.py tests/golden/v0.1.0

The folder holds the LMDB store (``store/``) and ``manifest.json`` (the version that
wrote it and, per session, the request records and their formats). A golden store is
never rewritten: ``tests/test_golden.py`` opens every one of them with the current code,
verifies it and replays every recorded request byte for byte, so a rule change that
would alter what an old record means fails the suite.

Contents: the demo (40 turns packed and recorded every turn, compactions, a rollup,
an overflow error and its recovery pack, a policy change), one transcript of each
corpus format (a Claude Code session with two imported compactions among them), and
on the demo and every imported session requests recorded in all four formats at
several budgets, plus a manual compaction of one imported session. From 0.2.0 on, also a
Codex session with freeform tool calls, and a 4k budget (new sessions pack under
packing rules 2). From 0.3.0 on, also a 16k budget (new sessions pack under packing rules
3, whose cut is replayed from the whole session), an erasure (the first tool result of the
OpenHands session, after its requests were recorded: those that held it replay as erased)
and requests recorded after it in every format. From 0.4.0 on, also a session with strict
tools (``ToolSpec.strict``), written through the `Session` facade (`STRICT`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or (Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus").resolve()
)

#: One transcript per corpus format (paths under the corpus folder).
TRANSCRIPTS = (
    "claude_code_jsonl/M-Thisness__M-Claude/Archives/3af9b1a7-6512-4883-ad18-320658ced099.jsonl",
    "claude_code_jsonl/M-Thisness__M-Claude/Archives/93a38075-1e1b-4210-978f-8e927e43b55b.jsonl",
    "codex_rollout_jsonl/Python-AI-Solutions__agentic-neurodata-conversion/codex/sessions/2025/"
    "09/29/rollout-2025-09-29T13-09-19-01999469-65fd-7fa2-ab93-d24bb4c714cb.jsonl",
    # A long autonomous turn with freeform (custom) tool calls: since 0.2.0.
    "codex_rollout_jsonl/MoonLadderStudios__MoonMind/codex/sessions/2025/11/13/"
    "rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl",
    "mini_swe_agent_traj_json/gruckion__mini-swe-agent/swebench_results/"
    "20251118_gemini-3-pro-74pct/trajs/django__django-16255/django__django-16255.traj.json",
    "swe_agent_traj/princeton-nlp__SWE-agent/trajectories/demonstrations/"
    "function_calling_simple.traj",
    "openhands_events/All-Hands-AI__OpenHands/tests/runtime/trajs/basic.json",
)
FORMATS = ("neutral", "openai-chat", "openai-responses", "anthropic")
BUDGETS = (128_000, 32_000, 16_000, 8_000, 4_000)
#: The session whose first tool result is erased (since 0.3.0), by its name's start.
ERASED = "basic-"
MODEL = "golden-model"
#: A session whose tools are strict, one not (since 0.4.0): run with the store's path.
STRICT = """
import sys, turnlog
from turnlog.adapters import Session
from turnlog.events import AssistantMessageAdded, TextPart, ToolCall

schema = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "lines": {"type": ["integer", "null"]}},
    "required": ["path", "lines"],
    "additionalProperties": False,
}
with turnlog.open(sys.argv[1]) as log:
    session = Session(log, "strict-tools", model="golden-model", format="openai-responses")
    session.system("base", "You read files with the tools you are given.")
    session.tools(
        [
            {"name": "read_file", "description": "Read a file.", "parameters": schema,
             "strict": True},
            {"name": "grep", "description": "Search.", "parameters": {"type": "object"}},
        ]
    )
    for n in range(3):
        session.user(f"Read part {n} of notes.txt.")
        call = ToolCall(id=f"call_{n}", name="read_file",
                        arguments='{"path":"notes.txt","lines":%d}' % (10 * n))
        log.append("strict-tools", AssistantMessageAdded(parts=(call,)))
        session.tool_result(f"call_{n}", f"part {n}: " + "the notes go on. " * 40)
        log.append("strict-tools", AssistantMessageAdded(parts=(TextPart(text=f"Part {n} read."),)))
"""


def run(store: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNLOG_STORE": str(store), "NO_COLOR": "1"}
    return subprocess.run(["turnlog", *args], env=env, capture_output=True, text=True, check=check)


def sessions(store: Path) -> list[str]:
    out = json.loads(run(store, "sessions", "--json").stdout)
    return [s["session"] for s in out["sessions"]]


def main(target: Path) -> None:
    if target.exists():
        raise SystemExit(f"{target} exists: a golden store is never rewritten")
    version = run(Path("/nonexistent"), "--version").stdout.split()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        run(store, "demo")
        for rel in TRANSCRIPTS:
            run(store, "import", "--skip-bad", str(CORPUS / rel))
        subprocess.run([sys.executable, "-c", STRICT, str(store)], check=True)
        recorded: dict[str, list[dict[str, object]]] = {}
        names = sessions(store)
        compacted = next(s for s in names if s.startswith("django__django-16255"))
        run(store, "compact", compacted, "--budget", "32000")
        for session in names:
            if session.endswith("-memories"):
                continue
            for budget in BUDGETS:
                for fmt in FORMATS:
                    done = run(
                        store,
                        "pack",
                        session,
                        "--record",
                        "--budget",
                        str(budget),
                        "--format",
                        fmt,
                        "--model",
                        MODEL,
                        check=False,
                    )
                    outcome = (
                        "recorded"
                        if done.returncode == 0
                        else done.stderr.strip().splitlines()[-1][:200]
                    )
                    recorded.setdefault(session, []).append(
                        {"budget": budget, "format": fmt, "outcome": outcome}
                    )
        erased = next(s for s in names if s.startswith(ERASED))
        first = json.loads(
            run(store, "log", erased, "--kind", "tool_result", "--json").stdout.splitlines()[0]
        )
        run(store, "erase", erased, str(first["seq"]), "--reason", "golden store: an erasure")
        for fmt in FORMATS:
            run(
                store,
                "pack",
                erased,
                "--record",
                "--budget",
                "32000",
                "--format",
                fmt,
                "--model",
                MODEL,
            )
        check = run(store, "verify", check=False)
        if check.returncode != 0:
            raise SystemExit(f"the new store does not verify: {check.stdout}{check.stderr}")
        target.mkdir(parents=True)
        import lmdb  # the store as it is, compacted into one file per database

        env = lmdb.open(str(store), readonly=True, lock=False, max_dbs=16)
        (target / "store").mkdir()
        env.copy(str(target / "store"), compact=True)
        env.close()
        manifest = {
            "version": version,
            "transcripts": list(TRANSCRIPTS),
            "formats": list(FORMATS),
            "budgets": list(BUDGETS),
            "model": MODEL,
            "compacted": compacted,
            "erased": {"session": erased, "seqs": [first["seq"]]},
            "packs": recorded,
        }
        (target / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(target / "store" / "lock.mdb", ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
