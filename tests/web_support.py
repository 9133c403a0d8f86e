"""Stores for the inspector's tests: the demo, a corpus transcript, hostile content.

Each builder writes a store on disk and closes it; the tests serve it read-only,
as ``turnlog serve`` does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import turnlog
from turnlog import Packer, Replayer
from turnlog.adapters.importers import import_path
from turnlog.adapters.providers import render_args, renderer
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    MemoryChanged,
    NotificationAdded,
    RecallAdded,
    RecallHit,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from turnlog.tools import demo

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS") or Path(__file__).parents[1] / ".." / "shared" / "corpus"
)
#: A small Claude Code transcript of the shared corpus (104 KB).
TRANSCRIPT = (
    CORPUS
    / "claude_code_jsonl/Durban-Designer__vsla/docs/history/raw_sessions"
    / "-home-kenth56-vsla/069508a5-1193-487c-a9b5-a6f5f3ae4f98.jsonl"
)

#: Hostile text: markup, a script, an event handler, javascript: links, terminal
#: escapes (colour, OSC 52 clipboard write, title change) and a bidi override. Every
#: script in it sets ``window.pwned``, which the browser test checks stays unset.
HOSTILE = (
    '<script>window.pwned="script"</script><img src=x onerror="window.pwned=\'img\'">'
    "<a href=\"javascript:window.pwned='link'\">click</a> [md](javascript:alert(1)) "
    '"><svg onload="window.pwned=\'svg\'"> \x1b[31mred\x1b[0m \x1b]52;c;ZXZpbA==\x07 '
    "\x1b]0;title\x07 \u202eevil\u202c {{ 7*7 }} ${7*7}"
)
#: A session id made of markup (ids may not hold control characters).
HOSTILE_SESSION = '<script>window.pwned="sid"</script>/"><img src=x onerror=window.pwned=1>'


def build_demo(path: Path, *, turns: int = demo.DEFAULT_TURNS) -> Path:
    """The demo session (packed, recorded, compacted, with memories) at ``path``."""
    with turnlog.open(path) as log:
        packer = Packer(log)
        compactor = turnlog.Compactor(log, packer)

        def on_turn(turn: demo.TurnResult) -> None:
            demo.pack_turn(
                log,
                packer,
                compactor,
                demo.DEFAULT_SESSION,
                turn,
                policy=demo.policy_for_turn(turn.turn),
                overflow=turn.turn == demo.OVERFLOW_TURN,
            )

        demo.run_demo(log, turns=turns, on_turn=on_turn)
    return path


_DEMO_CACHE: dict[int, Path] = {}


def demo_store(tmp: Path, *, turns: int = demo.DEFAULT_TURNS) -> Path:
    """A copy of the demo store in ``tmp`` (built once per test process)."""
    built = _DEMO_CACHE.get(turns)
    if built is None or not built.exists():
        built = build_demo(
            Path(os.environ.get("TMPDIR", "/tmp")) / f"turnlog-web-demo-{os.getpid()}-{turns}",
            turns=turns,
        )
        _DEMO_CACHE[turns] = built
    target = tmp / "demo"
    shutil.copytree(built, target)
    return target


def corpus_store(path: Path) -> tuple[Path, str, int]:
    """``TRANSCRIPT`` imported at ``path`` with one recorded Anthropic request:
    (store, session, request seq)."""
    with turnlog.open(path) as log:
        summary = import_path(log, str(TRANSCRIPT))
        session = summary.sessions[0]
        packer = Packer(log)
        replayer = Replayer(packer)
        policy = turnlog.Policy(context_window=16000, output_reserve=2000)
        render = renderer("anthropic", model="claude-sonnet-4-5", max_tokens=2000, blobs=log.blob)
        recorded = replayer.record(
            session,
            policy=policy,
            model="claude-sonnet-4-5",
            format="anthropic",
            render=render,
            render_args=render_args(max_tokens=2000),
        )
    return path, session, recorded.request_seq


def hostile_store(path: Path) -> tuple[Path, str, int]:
    """A session whose id and every field hold `HOSTILE`: (store, session, request seq)."""
    session = HOSTILE_SESSION
    with turnlog.open(path) as log:
        log.append(
            session,
            [
                SystemSectionSet(name="base", text="You are " + HOSTILE),
                ToolsSet(
                    tools=(
                        ToolSpec(
                            name="run<script>", description=HOSTILE, parameters='{"type": "object"}'
                        ),
                    )
                ),
                UserMessageAdded(text=HOSTILE),
                AssistantMessageAdded(
                    parts=(
                        TextPart(text=HOSTILE),
                        ToolCall(
                            id="call<img src=x onerror=window.pwned=2>",
                            name="run<script>",
                            arguments='{"cmd": ' + repr(HOSTILE).replace("'", '"') + "}",
                        ),
                    )
                ),
                ToolResultAdded(
                    call_id="call<img src=x onerror=window.pwned=2>",
                    tool_name="run<script>",
                    output=HOSTILE * 40,
                    exit_code=1,
                ),
                NotificationAdded(source="<b>cron</b>", text=HOSTILE),
                UserMessageAdded(text="again " + HOSTILE),
            ],
        )
        log.append(
            session,
            CompactionCommitted(
                first_seq=2,
                last_seq=4,
                covered_digest=turnlog.events.covered_digest(
                    [e.hash for e in log.read(session, 2, 5)]
                ),
                summary="## Summary\n" + HOSTILE,
            ),
        )
        log.append(
            session,
            RecallAdded(
                query=HOSTILE,
                hits=(RecallHit(session=session, seq=2, text=HOSTILE, score="1.000000"),),
            ),
        )
        log.append(
            f"{session}-memories",
            MemoryChanged(
                op="save",
                memory_id="m<i>1</i>",
                memory_type="project",
                retention="durable",
                title=HOSTILE,
                content=HOSTILE,
            ),
        )
        packer = Packer(log)
        replayer = Replayer(packer)
        policy = turnlog.Policy(context_window=16000, output_reserve=2000)
        request = replayer.record(session, policy=policy, model="m<script>").request_seq
        log.append(session, UserMessageAdded(text="third " + HOSTILE))
        second = replayer.record(session, policy=policy, model="m<script>").request_seq
        assert second > request
    return path, session, second
