"""The ``turnlog`` argument parser."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import turnlog
from turnlog.adapters.importers import FORMATS as IMPORT_FORMATS
from turnlog.adapters.providers import (
    PROVIDERS,
)
from turnlog.events import EVENT_KINDS as KINDS

from .. import demo
from ._common import (
    _budget,
    _nonneg,
    _Parser,
    _positive,
)
from .importing import (
    _cmd_import,
)
from .memories import (
    _cmd_memories,
    _cmd_recall,
)
from .packing import (
    _cmd_compact,
    _cmd_diff,
    _cmd_explain,
    _cmd_pack,
    _cmd_replay,
)
from .serve import (
    _cmd_serve,
)
from .store import (
    _cmd_blob,
    _cmd_checkpoint,
    _cmd_copy,
    _cmd_export,
    _cmd_log,
    _cmd_sessions,
    _cmd_show,
    _cmd_verify,
)
from .tour import (
    _cmd_demo,
)


def _build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, metavar="PATH",
                        help="the store directory or postgresql:// URL (default: "
                             "$TURNLOG_STORE, else ./.turnlog)")
    printing = _Parser(add_help=False)
    printing.add_argument("--json", action="store_true", help="machine-readable output")

    parser = _Parser(prog="turnlog", description="Inspect, verify and export a turnlog store.",
                     epilog="Exit codes: 0 ok, 1 a check failed, 2 usage error, 3 turnlog "
                            "error, 4 store missing. See docs/cli.md.")
    parser.add_argument("--store", default=None, metavar="PATH",
                        help="the store directory or postgresql:// URL (default: "
                             "$TURNLOG_STORE, else ./.turnlog)")
    parser.add_argument("--version", action="version", version=f"turnlog {turnlog.__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True,
                                parser_class=_Parser)

    def verb(name: str, run: Callable[[argparse.Namespace], int], help_text: str, *,
             prints: bool = True) -> argparse.ArgumentParser:
        parents = [common, printing] if prints else [common]
        p = sub.add_parser(name, parents=parents, help=help_text, description=help_text)
        p.set_defaults(run=run)
        return p

    verb("sessions", _cmd_sessions, "list sessions with their head seq, event count and hash")

    p = verb("log", _cmd_log, "list a session's events, one line each")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--from", dest="start", type=_nonneg, default=0, metavar="SEQ",
                   help="start at this seq (default 0)")
    p.add_argument("--kind", action="extend", nargs="+", choices=sorted(KINDS),
                   metavar="KIND",
                   help=f"only these kinds (repeatable): {', '.join(sorted(KINDS))}")
    p.add_argument("--limit", type=_nonneg, default=None, metavar="N",
                   help="print at most N events")

    p = verb("show", _cmd_show, "print one event in full, with its prev and hash")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("seq", metavar="SEQ", type=int, help="the seq (negative: from the end, -1 "
                   "is the head)")

    p = verb("verify", _cmd_verify, "check the hash chain and blobs; exit 1 naming the first "
             "bad event")
    p.add_argument("session", metavar="SESSION", nargs="?", default=None,
                   help="only this session (default: all sessions and every blob)")
    p.add_argument("--checkpoint", metavar="FILE", help="also check that the log extends this "
                   "checkpoint (from `turnlog checkpoint`)")
    p.add_argument("--key-file", metavar="FILE", help="key of a signed checkpoint")
    p.add_argument("--strict", action="store_true", help="also prove every record decodes "
                   "against the schema and is canonical (slower)")
    p.add_argument("--progress", action="store_true", help="report the events checked on "
                   "stderr as it goes")

    p = verb("copy", _cmd_copy, "copy every session, blob and cached count of store SRC "
             "(or only the sessions given, with the sessions their forks continue) into "
             "store DST (a directory or a postgresql:// URL), hashes preserved, after "
             "verifying each session in SRC; then verify the copy. A copy stopped half way "
             "leaves DST marked unfinished (verify fails) and resumes when run again")
    p.add_argument("source", metavar="SRC", help="the store to copy (opened read-only)")
    p.add_argument("target", metavar="DST", help="the store to copy into (created if "
                   "missing; a session it holds must be a prefix of SRC's: it is continued)")
    p.add_argument("--session", action="append", metavar="ID", default=None,
                   help="copy only this session, with its forks' lineage (repeatable)")

    p = verb("checkpoint", _cmd_checkpoint, "write a checkpoint (session, seq, hash, mac) of "
             "a session's head as JSON")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--key-file", metavar="FILE", help="sign with HMAC-SHA256 under this key "
                   "(the file's bytes, one trailing newline removed)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = verb("export", _cmd_export, "write a session as JSON lines, one event a line, hashes "
             "included", prints=False)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--complete", action="store_true", help="a backup `turnlog import` reads "
                   "back with every hash: also the sessions a fork continues (first) and the "
                   "blobs the events refer to")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = verb("blob", _cmd_blob, "write a blob's raw bytes", prints=False)
    p.add_argument("hash", metavar="HASH", help="the blob's hash, or a unique prefix of at "
                   "least 8 hex digits")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = verb("demo", _cmd_demo, "append a deterministic demo agent session, then verify it")
    p.add_argument("--turns", type=int, default=demo.DEFAULT_TURNS, metavar="N",
                   help=f"number of turns, 1 to {demo.MAX_TURNS} (default "
                        f"{demo.DEFAULT_TURNS})")
    p.add_argument("--session", default=demo.DEFAULT_SESSION,
                   help=f"session id (default {demo.DEFAULT_SESSION!r})")
    p.add_argument("--no-pack", action="store_true", help="only append the events (no "
                   "packing, requests, compaction or replay)")
    p.add_argument("--overflow-turn", type=int, default=None, metavar="N",
                   help="the turn whose request meets a context-overflow error (default "
                        f"{demo.OVERFLOW_TURN})")

    def policy_options(p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group()
        group.add_argument("--budget", type=_budget, metavar="N", help="context window in "
                           "tokens (the rest of the policy in force, or the defaults)")
        group.add_argument("--policy", metavar="FILE", help="a policy TOML file")
        p.add_argument("--agent", metavar="NAME", help="apply the [agents.NAME] table of "
                       "the policy file")

    p = verb("pack", _cmd_pack, "pack a session's prompt (optionally record it as a request)")
    p.add_argument("session", metavar="SESSION")
    policy_options(p)
    p.add_argument("--record", action="store_true", help="append the request record")
    p.add_argument("--format", default="neutral", choices=["neutral", *sorted(PROVIDERS)],
                   help="print the provider request body exactly as it would be sent, as "
                        "JSON (default: the neutral prompt and its accounting)")
    p.add_argument("--model", default="", help="model name put in the request body and record "
                   "(default with --format: the session's most recent model, named by a "
                   "recorded request or an assistant message)")
    p.add_argument("--max-tokens", type=_positive, default=None, metavar="N",
                   help="max output tokens in the request body (default: the policy's "
                        "output reserve)")

    p = verb("explain", _cmd_explain, "show the decision for every event of a recorded request")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("request_seq", metavar="REQ_SEQ", type=int)

    p = verb("replay", _cmd_replay, "re-pack recorded requests; exit 1 if any differs")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("request_seq", metavar="REQ_SEQ", type=int, nargs="?", default=None)
    p.add_argument("--all", action="store_true", help="every request of the session "
                   "(the default without REQ_SEQ)")

    p = verb("diff", _cmd_diff, "compare two recorded requests: shared prefix, changed "
             "decisions")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("request_a", metavar="REQ_A", type=int)
    p.add_argument("request_b", metavar="REQ_B", type=int)

    p = verb("compact", _cmd_compact, "compact a session now (appends the compaction events)")
    p.add_argument("session", metavar="SESSION")
    policy_options(p)
    p.add_argument("--summarizer", default=None, metavar="NAME",
                   help="the summarizer (default: extractive, offline)")

    p = verb("import", _cmd_import, "import transcripts (Claude Code, Codex, OpenAI, "
             "mini-swe-agent, SWE-agent, OpenHands, Aider); idempotent")
    p.add_argument("paths", nargs="+", metavar="FILE", help="files or directories")
    p.add_argument("--format", default=None, choices=sorted(IMPORT_FORMATS),
                   help="the format (default: detected from the content)")
    p.add_argument("--session", default=None, metavar="ID",
                   help="the session id (default: from the transcript)")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed records (listed) "
                   "instead of refusing the file")
    p.add_argument("--keep-going", action="store_true", help="go on past a file that cannot "
                   "be imported (listed with the reason) instead of stopping there")

    p = verb("memories", _cmd_memories, "list the memories of a session's memory session and "
             "the block in force")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--memory-session", metavar="ID", default=None,
                   help="the memory session (default: SESSION-memories)")
    p.add_argument("--block", action="store_true", help="also print the block in force")

    p = verb("recall", _cmd_recall, "search past events (BM25); --commit appends the results "
             "as a recall event so they may reach a prompt")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--session", action="append", metavar="ID",
                   help="search only these sessions (repeatable; default: all)")
    p.add_argument("-k", type=_nonneg, default=5, metavar="N", help="results (default 5)")
    p.add_argument("--commit", metavar="SESSION", default=None,
                   help="append the results to SESSION as a recall event")
    policy_options(p)

    p = verb("serve", _cmd_serve, "serve a read-only web inspector of the store (sessions, "
             "timelines, request receipts, diffs, summaries, memories; JSON under /api/)",
             prints=False)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default "
                   "127.0.0.1; any other address requires the token)")
    p.add_argument("--port", type=int, default=8765, metavar="N",
                   help="the port (default 8765; 0 picks a free one)")
    p.add_argument("--token", default=None, metavar="TOKEN",
                   help="the access token every request must carry (default: none on "
                        "loopback, a new random one printed with the address otherwise)")
    return parser
