"""Regenerate the seed corpora under fuzz/corpus/ (deterministic).

    python fuzz/make_seeds.py            # writes fuzz/corpus/<target>/seed-*

Seeds are small valid inputs of each target (events of every kind, records,
export lines, policies, provider bodies, transcript snippets, packing
scenarios); the fuzzer mutates them. Files other than ``seed-*`` (findings
kept as regression inputs) are left alone.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path

import msgspec
import turnlog
from turnlog._chain import link, pack_record
from turnlog._codec import encode_canonical
from turnlog.events import Event, event_to_json
from turnlog.log import GENESIS

ROOT = Path(__file__).resolve().parent / "corpus"
SHARED_CORPUS = Path("/work/shared/corpus")
MAX_SEED = 20_000


def _write(target: str, seeds: Iterable[bytes]) -> int:
    out = ROOT / target
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("seed-*"):
        old.unlink()
    n = 0
    for data in seeds:
        if not data or len(data) > MAX_SEED:
            continue
        name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
        (out / name).write_bytes(data)
        n += 1
    return n


def _events() -> list[Event]:
    """One or two events of every kind: the demo session and a hand-built one."""
    from turnlog.tools import demo

    log = turnlog.open(":memory:")
    demo.run_demo(log, turns=6)
    events = log.read(demo.DEFAULT_SESSION)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.test_hash_vector import _every_kind

    log2 = turnlog.open(":memory:")
    _every_kind(log2)
    events += log2.read("kinds") + log2.read("kinds-fork")
    seen: dict[str, int] = {}
    picked = []
    for ev in events:
        if seen.get(ev.kind, 0) < 2:
            seen[ev.kind] = seen.get(ev.kind, 0) + 1
            picked.append(ev)
    return picked


def codec_seeds() -> list[bytes]:
    seeds = []
    for ev in _events():
        bare = msgspec.structs.replace(ev, prev=b"", hash=b"")
        canonical = encode_canonical(bare)
        seeds.append(canonical)
        seeds.append(msgspec.msgpack.encode(ev.body))
        seeds.append(pack_record(GENESIS, link(GENESIS, canonical), canonical))
        seeds.append(event_to_json(ev))
    return seeds


def _dict_entry(token: bytes) -> str:
    return (
        '"'
        + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\x{b:02x}" for b in token)
        + '"'
    )


def codec_dict() -> list[str]:
    """libFuzzer dictionary: every tag and field name of the schema, as msgpack strs."""
    names: set[str] = set()
    seen: set[type] = set()

    def walk(info: msgspec.inspect.Type) -> None:
        mi = msgspec.inspect
        if isinstance(info, mi.StructType) and info.cls not in seen:
            seen.add(info.cls)
            if isinstance(info.tag, str):
                names.add(info.tag)
            if info.tag_field:
                names.add(info.tag_field)
            for field in info.fields:
                names.add(field.encode_name)
                walk(field.type)
        elif isinstance(info, mi.UnionType):
            for t in info.types:
                walk(t)
        elif isinstance(info, mi.Metadata):
            walk(info.type)
        elif isinstance(info, (mi.ListType, mi.VarTupleType)):
            walk(info.item_type)
        elif isinstance(info, mi.DictType):
            walk(info.value_type)

    walk(msgspec.inspect.type_info(Event))
    return [_dict_entry(msgspec.msgpack.encode(n)) for n in sorted(names)]


def pack_seeds() -> list[bytes]:
    """Byte strings for the provider-driven pack harness (any bytes build a case)."""
    import random

    out = []
    for i in range(40):
        rng = random.Random(i)
        out.append(rng.randbytes(rng.choice([64, 256, 1024, 2048, 4000])))
    return out


POLICIES = [
    b"",
    b"context_window = 200000\noutput_reserve = 32000\n",
    b"context_window = 8000\noutput_reserve = 1000\nsafety_margin = 100\n"
    b"warning_ratio = 0.7\ncompact_ratio = 0.8\nblocking_ratio = 0.95\n"
    b"warning_buffer = 500\ncompact_buffer = 300\nblocking_buffer = 100\n",
    b"truncate = true\ntruncate_lines = 200\ntruncate_bytes = 4096\n"
    b"truncate_head_ratio = 0.5\ndedup = false\nprune = true\nprune_min_savings = 0\n"
    b'tokenizer = "o200k_base"\n',
    b'keep_recent_turns = 1\nmemory_refresh = ["session_start", "every_turn"]\n'
    b"cache_breakpoints = 2\ninput_price = 1.25\ncache_read_price = 0.125\n",
    b'[tool_kinds]\nRead = "file_read"\nrun_tests = "bash"\n\n'
    b"[tool_weights]\nbash = 90\nother = 1\n",
    b"context_window = 128000\n\n[agents.reviewer]\ncontext_window = 32000\n"
    b"output_reserve = 4000\n\n[agents.coder]\ntrim = false\nsummary_budget = 0.5\n",
    b"warning_buffer = nan\n",
    b"context_window = 1000\noutput_reserve = 1000\n",
    b"[agents]\nx = 1\n",
]


def responses_seeds() -> list[bytes]:
    """Selector byte (format, entry point, status) + a provider body or stream."""
    from tests import test_responses as tr

    formats = ("openai-chat", "openai-responses", "anthropic")
    errors = (tr.OPENAI_OVERFLOW, tr.RESPONSES_OVERFLOW, tr.ANTHROPIC_OVERFLOW)
    out = []
    for i, fmt in enumerate(formats):
        body, stream = tr.FIXTURES[fmt]
        raw = json.dumps(body).encode()
        stream_bytes = stream.encode() if isinstance(stream, str) else bytes(stream)
        out.append(bytes([i]) + raw)  # parse_response
        out.append(bytes([3 + i]) + stream_bytes)  # parse_stream
        out.append(bytes([6 + i]) + raw)  # parse_http 200
        out.append(bytes([6 + i + 12]) + stream_bytes)  # parse_http 200, a stream
        out.append(bytes([6 + i + 24]) + json.dumps(errors[i]).encode())  # parse_http 400
        out.append(bytes([9 + i + 36]) + json.dumps(errors[i]).encode())  # parse_error 413
    out.append(bytes([9 + 48]) + b"<html><title>502 Bad Gateway</title></html>")
    return out


def _shrink(value: object, depth: int = 0) -> object:
    """A JSON document cut down: lists keep their first items, long strings are clipped."""
    if isinstance(value, list):
        return [_shrink(v, depth + 1) for v in value[:6]]
    if isinstance(value, dict):
        return {k: _shrink(v, depth + 1) for k, v in value.items()}
    if isinstance(value, str) and len(value) > 400:
        return value[:400]
    return value


def importer_seeds() -> list[bytes]:
    """Selector byte (format index, or detection) + a transcript snippet."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from turnlog.adapters.importers import FORMATS

    from tests import test_importers as ti

    detect = len(FORMATS)
    out = [bytes([FORMATS.index(fmt)]) + data for fmt, data in ti._SEEDS.items()]
    out += [bytes([detect]) + data for data in ti._SEEDS.values()]
    if SHARED_CORPUS.is_dir():
        for path in sorted(SHARED_CORPUS.rglob("*")):
            if not path.is_file() or path.name == "SOURCES.md":
                continue
            data = path.read_bytes()
            if path.suffix == ".jsonl":
                lines = data.splitlines(keepends=True)
                snippet = b""
                for line in lines:
                    if len(snippet) + len(line) > 12_000:
                        break
                    snippet += line
                if not snippet and lines:  # a first line over the limit: clip its strings
                    try:
                        snippet = json.dumps(_shrink(json.loads(lines[0]))).encode() + b"\n"
                    except ValueError:
                        continue
            else:
                try:
                    snippet = json.dumps(_shrink(json.loads(data))).encode()
                except ValueError:
                    continue
            if len(snippet) < MAX_SEED:
                out.append(bytes([detect]) + snippet)
    return out


def cli_seeds() -> list[bytes]:
    """Argument lines of every verb (NUL-separated, ``@FILE`` the input file), each
    with the input file it reads: a policy, a checkpoint, a key, a transcript."""
    policy = POLICIES[2] + b"[agents.small]\ncontext_window = 4000\n"
    checkpoint = b'{"session": "chat", "seq": 1, "hash": "' + b"0" * 64 + b'", "mac": ""}'
    transcript = (
        b'{"type": "user", "sessionId": "s1", "uuid": "u1", "message": '
        b'{"role": "user", "content": "hi"}}\n'
    )
    lines: list[tuple[list[str], bytes]] = [
        (["sessions"], b""),
        (["sessions", "--json"], b""),
        (["log", "chat"], b""),
        (["log", "hostile", "--kind", "user", "assistant"], b""),
        (["log", "chat", "--from", "5", "--limit", "3", "--json"], b""),
        (["show", "chat", "-1"], b""),
        (["show", "hostile", "1"], b""),
        (["show", "hostile", "0", "--json"], b""),
        (["verify"], b""),
        (["verify", "chat", "--checkpoint", "@FILE"], checkpoint),
        (["verify", "--checkpoint", "@FILE", "--key-file", "@FILE"], checkpoint),
        (["checkpoint", "chat", "--key-file", "@FILE"], b"secret\n"),
        (["export", "hostile"], b""),
        (["blob", "00000000"], b""),
        (["demo", "--turns", "2", "--session", "d2"], b""),
        (["pack", "chat"], b""),
        (["pack", "hostile", "--budget", "4000"], b""),
        (["pack", "chat", "--policy", "@FILE", "--agent", "small"], policy),
        (["pack", "chat", "--format", "anthropic", "--model", "m"], b""),
        (["pack", "chat", "--record", "--json"], b""),
        (["demo", "--turns", "1"], b""),
        (["explain", "chat", "-1"], b""),
        (["replay", "chat"], b""),
        (["diff", "chat", "4", "9"], b""),
        (["compact", "chat", "--budget", "6000"], b""),
        (["import", "@FILE"], transcript),
        (["import", "@FILE", "--format", "codex"], transcript),
        (["import", "@FILE", "--skip-bad", "--session", "imp"], transcript + b"{\n"),
        (["memories", "hostile", "--block"], b""),
        (["memories", "chat", "--json"], b""),
        (["recall", "test", "-k", "3"], b""),
        (["recall", "evil", "--commit", "chat"], b""),
        (["--help"], b""),
        (["pack", "--help"], b""),
    ]
    return [b"\x00".join(a.encode() for a in argv) + b"\n" + body for argv, body in lines]


def cli_dict() -> list[str]:
    """Verb and option names of the command, for libFuzzer's ``-dict=``."""
    from turnlog.tools.cli import _build_parser

    parser = _build_parser()
    tokens: set[str] = {"@FILE", "chat", "hostile", "-1", "\x00"}
    for action in parser._actions:
        for verb, sub in (getattr(action, "choices", None) or {}).items():
            tokens.add(verb)
            for option in getattr(sub, "_actions", []):
                tokens.update(option.option_strings)
    return [_dict_entry(t.encode()) for t in sorted(tokens)]


def main() -> None:
    dicts = Path(__file__).resolve().parent / "dicts"
    dicts.mkdir(exist_ok=True)
    (dicts / "codec.dict").write_text("\n".join(codec_dict()) + "\n")
    counts = {
        "codec": _write("codec", codec_seeds()),
        "pack": _write("pack", pack_seeds()),
        "policy": _write("policy", POLICIES),
        "responses": _write("responses", responses_seeds()),
        "importers": _write("importers", importer_seeds()),
        "cli": _write("cli", cli_seeds()),
    }
    (dicts / "cli.dict").write_text("\n".join(cli_dict()) + "\n")
    for target, n in counts.items():
        print(f"{target}: {n} seeds")


if __name__ == "__main__":
    main()
