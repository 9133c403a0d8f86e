"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Theory of operation
-------------------
A file is a list of records, one JSON object per line, in append order.
Conversation records (``user``, ``assistant``, ``system``, ``progress``...)
carry ``uuid`` and ``parentUuid`` and form a tree: rewinds and retries leave
dead branches, parallel tool calls hang their results off the record of the
block that made the call, and a compaction restarts the tree at a
``compact_boundary`` (2.x, linked back through ``logicalParentUuid``) or at an
``isCompactSummary`` user record without a parent (1.0.x, linked here to the
record written just before it).

The **main line** is the path from the last record of the file up to the
root, closed over what belongs to it: the other blocks of the API responses
on the path (same ``message.id``), the results of the tool calls on the path,
and metadata records hanging off it. Every other record is on a **dead
branch**; each branch becomes a fork of the session it branched from
(``SessionForked`` after the event holding the branch point), so nothing is
lost and ``lineage`` of the fork shows the conversation as it was on that
branch. **Sidechains** (``isSidechain``: Task subagents written inline by
1.0.x) become child sessions whose first event names the parent session and,
when the prompt matches, the spawning ``Task`` call in ``meta["parent"]``;
``agent-*.jsonl`` files are such child sessions on their own.

One assistant API response is written as several records, one per content
block, each repeating ``usage``: they are merged into one
``AssistantMessageAdded`` (at the first block's place) plus one derived
``ResponseReceived`` carrying the last record's usage. Tool results become one
``ToolResultAdded`` per block; the ``toolUseResult`` field that repeats the
output in structured form stays in the record's ``meta`` and is not counted.
A compaction becomes a `CompactionEntry`. A ``compaction`` content block (the
Messages API's own compaction) is kept whole as a `NativePart` of the assistant
message, byte for byte, and goes back to Anthropic unchanged. Records that map to no event
(snapshots, queue operations, titles, turn durations, local commands) are
kept verbatim in the ``meta`` of a neighbouring event.

Lines that are not valid JSON are first re-joined with the lines after them
(a raw newline inside a string splits a record over several lines); what
still does not parse is a malformed record.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import msgspec
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    Body,
    CompactionCommitted,
    Event,
    ImagePart,
    NativePart,
    NotificationAdded,
    Part,
    ProviderErrorReceived,
    ReasoningPart,
    ResponseReceived,
    SessionForked,
    TextPart,
    ToolCall,
    ToolResultAdded,
    Usage,
    UserMessageAdded,
)

from ._plan import (
    JSON_ERRORS,
    BadRecord,
    CompactionEntry,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    RecordSink,
    SkippedRecord,
    count_of,
    decode_or_text,
    dumps,
    dumps_sorted,
    format_time,
    get_bool,
    get_dict,
    get_list,
    get_str,
    kind_of,
    parse_time,
    positioned,
    session_slug,
    text_of,
    without,
    write_lines,
)

__all__ = ["FORMAT", "NAME", "export", "is_subagent_file", "link_subagents", "parse"]

NAME = "claude_code"
_SUMMARIZER = "claude-code"
_META_SOURCE = "claude-code/meta"
_CONVERSATION = frozenset({"user", "assistant"})
_EXIT = re.compile(r"^(?:Error: )?Exit code (-?\d+)")
_REJOIN = 8  # physical lines a record may be split over


@dataclass
class _Rec:
    line: int
    obj: Obj
    bad: str | None = None  # the line's text, for a record left out with skip_bad

    @property
    def where(self) -> str:
        return f"line {self.line}"

    @property
    def type(self) -> str:
        return str(self.obj.get("type"))

    @property
    def uuid(self) -> str | None:
        value = self.obj.get("uuid")
        return value if isinstance(value, str) and value else None

    @property
    def sidechain(self) -> bool:
        return self.obj.get("isSidechain") is True

    @property
    def message(self) -> Obj:
        value = self.obj.get("message")
        return value if isinstance(value, dict) else {}

    @property
    def message_id(self) -> str:
        value = self.message.get("id")
        return value if isinstance(value, str) else ""


# -- reading ------------------------------------------------------------------------------
def _read(
    data: bytes,
    source: str,
    skip_bad: bool,
) -> tuple[list[_Rec], list[_Rec], list[SkippedRecord]]:
    """The valid records, the records left out (kept verbatim), and why they were."""
    lines = data.split(b"\n")
    records: list[_Rec] = []
    dropped: list[_Rec] = []
    skipped: list[SkippedRecord] = []

    def drop(number: int, bad: BadRecord) -> None:
        if not skip_bad:
            raise bad
        skipped.append(SkippedRecord(source, bad.where, bad.field, bad.reason))
        text = b"\n".join(lines[number - 1 : number]).rstrip(b"\r")
        dropped.append(_Rec(number, {}, text.decode("utf-8", errors="replace")))

    number = 0
    while number < len(lines):
        raw = lines[number].rstrip(b"\r")
        number += 1
        if not raw.strip():
            continue
        start = number
        try:
            obj = msgspec.json.decode(raw)
        except JSON_ERRORS as exc:
            joined = _rejoin(lines, number - 1)
            if joined is None:
                drop(start, BadRecord(f"line {start}", "", f"not valid JSON ({exc})"))
                continue
            obj, used = joined
            number += used
        if not isinstance(obj, dict):
            drop(
                start,
                BadRecord(f"line {start}", "", f"expected a JSON object, found {kind_of(obj)}"),
            )
            continue
        rec = _Rec(start, obj)
        try:
            _check(rec)
        except BadRecord as exc:
            drop(start, exc)
            continue
        records.append(rec)
    return records, dropped, skipped


def _rejoin(lines: list[bytes], index: int) -> tuple[Any, int] | None:
    """The record that starts at ``lines[index]`` and continues over the next lines
    (joined with an escaped newline), and how many more lines it used."""
    text = lines[index].rstrip(b"\r")
    for extra in range(1, _REJOIN + 1):
        if index + extra >= len(lines):
            return None
        follow = lines[index + extra].rstrip(b"\r")
        try:
            msgspec.json.decode(follow)
            return None  # the next line is a record of its own
        except JSON_ERRORS:
            pass
        text = text + b"\\n" + follow
        try:
            return msgspec.json.decode(text), extra
        except JSON_ERRORS:
            continue
    return None


def _check(rec: _Rec) -> None:
    """Structural checks of the fields the mapping relies on (BadRecord when wrong)."""
    obj, where = rec.obj, rec.where
    kind = get_str(obj, "type", where, "type")
    if "uuid" in obj:
        get_str(obj, "uuid", where, "uuid", optional=True)
    for name in ("parentUuid", "logicalParentUuid", "sessionId"):
        if obj.get(name) is not None:
            get_str(obj, name, where, name)
    parse_time(obj.get("timestamp"), where, "timestamp")
    get_bool(obj, "isSidechain", where, "isSidechain")
    if kind not in _CONVERSATION:
        if kind == "system" and obj.get("content") is not None:
            get_str(obj, "content", where, "content")
        return
    get_str(obj, "uuid", where, "uuid")
    message = get_dict(obj, "message", where, "message")
    content = message.get("content")
    if isinstance(content, str):
        return
    if kind == "assistant" and content is None:
        return
    blocks = get_list(message, "content", where, "message.content")
    for i, block in enumerate(blocks):
        path = f"message.content[{i}]"
        if not isinstance(block, dict):
            raise BadRecord(where, path, f"expected a content block object, found {kind_of(block)}")
        btype = get_str(block, "type", where, f"{path}.type")
        if btype == "text":
            get_str(block, "text", where, f"{path}.text")
        elif btype == "thinking":
            get_str(block, "thinking", where, f"{path}.thinking")
        elif btype == "tool_use":
            if not get_str(block, "id", where, f"{path}.id"):
                raise BadRecord(where, f"{path}.id", "expected a non-empty tool call id")
            get_str(block, "name", where, f"{path}.name")
        elif btype == "tool_result":
            if not get_str(block, "tool_use_id", where, f"{path}.tool_use_id"):
                raise BadRecord(where, f"{path}.tool_use_id", "expected a non-empty id")
            inner = block.get("content")
            if inner is not None and not isinstance(inner, (str, list)):
                raise BadRecord(
                    where,
                    f"{path}.content",
                    f"expected a string or a list of blocks, found {kind_of(inner)}",
                )
            get_bool(block, "is_error", where, f"{path}.is_error")
        elif btype == "image":
            get_dict(block, "source", where, f"{path}.source")


# -- the tree -----------------------------------------------------------------------------
class _Tree:
    """Effective parents of the tree records of one file."""

    def __init__(self, records: list[_Rec]) -> None:
        self.nodes: list[_Rec] = []
        self.by_uuid: dict[str, _Rec] = {}
        for rec in records:
            uid = rec.uuid
            if uid is not None and uid not in self.by_uuid:
                self.by_uuid[uid] = rec
                self.nodes.append(rec)
        self.parent: dict[str, str | None] = {}
        last: dict[bool, str] = {}
        for rec in self.nodes:
            uid = rec.uuid
            assert uid is not None
            self.parent[uid] = self._parent(rec, last.get(rec.sidechain))
            last[rec.sidechain] = uid

    def _parent(self, rec: _Rec, previous: str | None) -> str | None:
        obj = rec.obj
        parent = obj.get("parentUuid")
        if isinstance(parent, str) and parent:
            # A parent that is not in the file (a record lost to a bad line) is
            # replaced by the record written just before on the same chain.
            return parent if parent in self.by_uuid else previous
        logical = obj.get("logicalParentUuid")
        if isinstance(logical, str) and logical in self.by_uuid:
            return logical
        if obj.get("isCompactSummary") is True and not rec.sidechain:
            return previous
        return None

    def split(self, members: list[_Rec]) -> tuple[list[_Rec], list[list[_Rec]]]:
        """The main line of ``members`` (file order) and its dead branches (each a
        subtree, file order)."""
        inside = {m.uuid for m in members}
        line: set[str | None] = set()
        node: str | None = members[-1].uuid
        while node is not None and node in inside and node not in line:
            line.add(node)
            node = self.parent[node]
        messages = {
            self.by_uuid[u].message_id
            for u in line
            if u is not None and self.by_uuid[u].type == "assistant"
        } - {""}
        calls = {call for u in line if u is not None for call in _call_ids(self.by_uuid[u])}
        changed = True
        while changed:
            changed = False
            for rec in members:
                uid = rec.uuid
                if uid in line or self.parent[uid or ""] not in line:
                    continue
                if rec.type == "assistant":
                    join = rec.message_id in messages
                elif rec.type == "user":
                    results = _result_ids(rec)
                    join = bool(results) and results <= calls
                else:
                    join = True
                if join:
                    line.add(uid)
                    if rec.type == "assistant" and rec.message_id:
                        messages.add(rec.message_id)
                        calls.update(_call_ids(rec))
                    changed = True
        main = [m for m in members if m.uuid in line]
        return main, self.subtrees([m for m in members if m.uuid not in line])

    def subtrees(self, members: list[_Rec]) -> list[list[_Rec]]:
        """``members`` grouped by their top-most ancestor among them (file order)."""
        inside = {m.uuid for m in members}
        groups: dict[str, list[_Rec]] = {}
        for rec in members:
            top = rec.uuid
            seen: set[str] = set()
            while top is not None and self.parent[top] in inside and top not in seen:
                seen.add(top)
                top = self.parent[top]
            groups.setdefault(top or "", []).append(rec)
        return list(groups.values())


def _call_ids(rec: _Rec) -> set[str]:
    content = rec.message.get("content")
    if not isinstance(content, list):
        return set()
    return {
        b["id"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    }


def _result_ids(rec: _Rec) -> set[str]:
    content = rec.message.get("content")
    if not isinstance(content, list) or not content:
        return set()
    if not all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return set()
    return {str(b.get("tool_use_id")) for b in content}


# -- parsing --------------------------------------------------------------------------------
@dataclass
class _Context:
    """What the conversion of every plan of one file shares."""

    source: str
    tools: dict[str, str] = field(default_factory=dict)  # tool_use id -> tool name
    blobs: dict[str, tuple[bytes, str]] = field(default_factory=dict)


def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map one Claude Code JSONL file to plans (main session, forks, sidechains).

    Raises:
        BadRecord: a malformed record (unless ``skip_bad``).
    """
    records, dropped, skipped = _read(data, source, skip_bad)
    ctx = _Context(source)
    for rec in records:
        if rec.type == "assistant":
            for block in rec.message.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    ctx.tools.setdefault(str(block["id"]), str(block.get("name", "")))
    tree = _Tree(records)
    session = session_slug(
        next(
            (str(r.obj["sessionId"]) for r in records if isinstance(r.obj.get("sessionId"), str)),
            Path(source).stem,
        )
    )
    main_nodes = [r for r in tree.nodes if not r.sidechain]
    side_nodes = [r for r in tree.nodes if r.sidechain]
    plans: list[Plan] = []
    agent = session_slug(
        next((str(r.obj["agentId"]) for r in records if isinstance(r.obj.get("agentId"), str)), "")
    )
    if not main_nodes and side_nodes:
        # A subagent file: its sidechain is the file's conversation.
        main_nodes, side_nodes = side_nodes, []
        name = (
            f"{session}/agent-{agent}" if agent else f"{session}/{session_slug(Path(source).stem)}"
        )
        main = Plan(natural=name)
        main.parent = {"session": session, "kind": "subagent", "agent_id": agent}
    else:
        main = Plan(natural=session)
    plans.append(main)
    loose = [r for r in records if r.uuid is None or tree.by_uuid.get(r.uuid) is not r]
    loose += dropped
    main.entries = _line_plans(tree, main_nodes, loose, ctx, plans, 0, session)
    for group in tree.subtrees(side_nodes):
        root = group[0]
        suffix = session_slug(
            f"agent-{root.obj['agentId']}"
            if isinstance(root.obj.get("agentId"), str)
            else f"sidechain-{(root.uuid or '')[:8]}"
        )
        child = Plan(natural=f"{session}/{suffix}", suffix=suffix)
        child.parent = {
            "plan": 0,
            "inline": True,
            "kind": "sidechain",
            **_spawning_call(root, records),
        }
        plans.append(child)
        child.entries = _line_plans(tree, group, [], ctx, plans, len(plans) - 1, session)
    return Parsed(format=NAME, plans=plans, skipped=skipped, blobs=ctx.blobs)


def _spawning_call(root: _Rec, records: list[_Rec]) -> Obj:
    """The Task call whose prompt is the sidechain's first message (1.0.x inline
    sidechains), searched backwards from the sidechain's first record."""
    prompt = root.message.get("content")
    if not isinstance(prompt, str):
        return {}
    for rec in reversed(records):
        if rec.line >= root.line or rec.type != "assistant" or rec.sidechain:
            continue
        for block in rec.message.get("content") or ():
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_use"
                and isinstance(block.get("input"), dict)
                and block["input"].get("prompt") == prompt
            ):
                return {"call_id": block["id"]}
    return {}


def _line_plans(
    tree: _Tree,
    members: list[_Rec],
    loose: list[_Rec],
    ctx: _Context,
    plans: list[Plan],
    index: int,
    session: str,
) -> list[Entry | CompactionEntry]:
    """Entries of the main line of ``members`` (plus ``loose`` records, by file
    order); appends a plan per dead branch: a fork after the entry holding the
    branch point, or a linked session when no entry precedes it."""
    if not members:
        return _Converter(ctx).run(sorted(loose, key=lambda r: r.line))
    main, branches = tree.split(members)
    items = sorted(main + loose, key=lambda r: r.line)
    conv = _Converter(ctx)
    entries = conv.run(items)
    for branch in branches:
        root = branch[0]
        parent_uuid = tree.parent[root.uuid or ""]
        at = conv.holder.get(parent_uuid or "")
        suffix = session_slug(f"branch-{(root.uuid or '')[:8]}")
        plan = Plan(natural=f"{session}/{suffix}", suffix=suffix)
        if at is not None:
            plan.fork = (index, at)
        else:
            plan.parent = {"plan": index, "branch_of": parent_uuid or "", "inline": True}
        plans.append(plan)
        plan.entries = _line_plans(tree, branch, [], ctx, plans, len(plans) - 1, session)
    return entries


class _Converter:
    """Turns the records of one line (file order) into entries."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.entries: list[Entry | CompactionEntry] = []
        self.sink = RecordSink(NAME)
        self.holder: dict[str, str] = {}  # record uuid -> key of the entry holding it
        self.merged: dict[str, tuple[int, int | None]] = {}  # message id -> entry indexes
        self.boundary: _Rec | None = None

    def run(self, items: list[_Rec]) -> list[Entry | CompactionEntry]:
        for rec in items:
            before = len(self.entries)
            self._record(rec)
            uid = rec.uuid
            if uid is not None:
                if len(self.entries) > before:
                    self.holder[uid] = self.entries[before].key
                elif rec.type == "assistant" and rec.message_id in self.merged:
                    self.holder[uid] = self.entries[self.merged[rec.message_id][0]].key
                elif self.entries:
                    self.holder[uid] = self.entries[-1].key
        self._close_boundary()
        last = items[-1] if items else None
        self.sink.finish(
            self.entries,
            key="cc:records",
            time=parse_time(last.obj.get("timestamp"), last.where, "timestamp") if last else None,
            where=last.where if last else "file",
        )
        return self.entries

    # -- dispatch ---------------------------------------------------------------------
    def _record(self, rec: _Rec) -> None:
        kind = rec.type
        obj = rec.obj
        if rec.bad is not None:
            self.sink.hold({"line": rec.line, "text": rec.bad})
        elif kind == "user":
            if obj.get("isCompactSummary") is True:
                self._compaction(rec)
            else:
                self._close_boundary()
                self._user(rec)
        elif kind == "assistant":
            self._close_boundary()
            self._assistant(rec)
        elif kind == "system" and obj.get("subtype") == "compact_boundary":
            self._close_boundary()
            self.boundary = rec
        elif kind == "system" and obj.get("subtype") == "api_error":
            self._emit(
                rec,
                _api_error(obj, str(obj.get("content") or "")),
                f"cc:{rec.uuid}",
                {"line": rec.line, "raw": obj},
            )
        else:
            self.sink.hold({"line": rec.line, "record": obj})

    def _emit(self, rec: _Rec, body: Body, key: str, meta: Obj, time: int | None = None) -> None:
        if time is None:
            time = parse_time(rec.obj.get("timestamp"), rec.where, "timestamp")
        self.entries.append(Entry(body, key, time, self.sink.attach(meta), rec.where))

    # -- user records -------------------------------------------------------------------
    def _user(self, rec: _Rec) -> None:
        obj = rec.obj
        raw = dict(obj)
        message = dict(rec.message)
        raw["message"] = message
        notify = obj.get("isMeta") is True
        content = message.get("content")
        bodies: list[Body] = []
        if isinstance(content, str):
            del message["content"]
            bodies.append(_user_text(content, notify))
        else:
            blocks: list[Any] = []
            for block in content or ():
                body, rest = self._user_block(block, notify)
                blocks.append(rest)
                if body is not None:
                    bodies.append(body)
            message["content"] = blocks
        if not bodies:
            self.sink.hold({"line": rec.line, "record": obj})
            return
        many = len(bodies) > 1
        for i, body in enumerate(bodies):
            meta: Obj = {"line": rec.line, "raw": raw} if i == 0 else {"cont": True}
            self._emit(rec, body, f"cc:{rec.uuid}:{i}" if many else f"cc:{rec.uuid}", meta)

    def _user_block(self, block: Obj, notify: bool) -> tuple[Body | None, Obj]:
        btype = block.get("type")
        if btype == "text":
            return _user_text(block["text"], notify), without(block, "text")
        if btype == "image":
            image, rest = self._image(block)
            if image is not None:
                return UserMessageAdded(text="", images=(image,)), rest
            return None, block
        if btype == "tool_result":
            return self._tool_result(block)
        return None, block

    def _tool_result(self, block: Obj) -> tuple[Body, Obj]:
        call = str(block["tool_use_id"])
        rest = without(block, "tool_use_id")
        content = block.get("content")
        if isinstance(content, str) or content is None:
            output = content or ""
            rest.pop("content", None)
        else:
            texts = [
                b.get("text")
                for b in content
                if isinstance(b, dict)
                and b.get("type") == "text"
                and isinstance(b.get("text"), str)
            ]
            output = "\n".join(str(t) for t in texts)
            if len(content) == 1 and len(texts) == 1:
                rest["content"] = [without(content[0], "text")]
        error = block.get("is_error") is True
        if isinstance(block.get("is_error"), bool):
            del rest["is_error"]
        exit_code: int | None = None
        if error:
            found = _EXIT.match(output)
            if found and len(found.group(1)) < 18:
                exit_code = int(found.group(1))
        body = ToolResultAdded(
            call_id=call,
            tool_name=self.ctx.tools.get(call, ""),
            output=output,
            is_error=error,
            exit_code=exit_code,
        )
        return body, rest

    def _image(self, block: Obj) -> tuple[ImagePart | None, Obj]:
        source = block.get("source")
        if not isinstance(source, dict):
            return None, block
        media = source.get("media_type")
        media_type = media if isinstance(media, str) and media else "image/png"
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            try:
                data = base64.b64decode(source["data"], validate=True)
            except (binascii.Error, ValueError):
                return None, block
            if base64.b64encode(data).decode() != source["data"]:
                return None, block  # not canonical base64: kept verbatim
            digest = blake3.blake3(data).hexdigest()
            self.ctx.blobs[digest] = (data, media_type)
            ref = BlobRef(hash=digest, size=len(data), media_type=media_type)
            rest = dict(block)
            rest["source"] = without(source, "data")
            return ImagePart(media_type=media_type, blob=ref), rest
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            rest = dict(block)
            rest["source"] = without(source, "url")
            return ImagePart(media_type=media_type, url=source["url"]), rest
        return None, block

    # -- assistant records -----------------------------------------------------------------
    def _assistant(self, rec: _Rec) -> None:
        obj = rec.obj
        raw = dict(obj)
        message = dict(rec.message)
        raw["message"] = message
        content = message.get("content")
        parts: list[Part] = []
        if isinstance(content, str):
            del message["content"]
            parts.append(TextPart(text=content))
        elif isinstance(content, list):
            blocks: list[Any] = []
            for block in content:
                part, rest = self._assistant_block(block)
                blocks.append(rest)
                if part is not None:
                    parts.append(part)
            message["content"] = blocks
        mid = rec.message_id
        residual = {"line": rec.line, "raw": raw}
        if mid and mid in self.merged and obj.get("isApiErrorMessage") is not True:
            at, usage_at = self.merged[mid]
            entry = self.entries[at]
            assert isinstance(entry, Entry) and isinstance(entry.body, AssistantMessageAdded)
            entry.body = msgspec.structs.replace(entry.body, parts=entry.body.parts + tuple(parts))
            entry.meta["records"].append(residual)
            self._usage(rec, mid, usage_at)
            return
        body = AssistantMessageAdded(
            parts=tuple(parts), model=str(message.get("model") or ""), response_id=mid[:256]
        )
        self._emit(rec, body, f"cc:{rec.uuid}", {"line": rec.line, "records": [residual]})
        at = len(self.entries) - 1
        if obj.get("isApiErrorMessage") is True:
            text = "".join(p.text for p in parts if isinstance(p, TextPart))
            self._emit(rec, _api_error(obj, text), f"cc:{rec.uuid}:error", {"derived": True})
            return
        usage_at = self._usage(rec, mid, None)
        if mid:
            self.merged[mid] = (at, usage_at)

    def _assistant_block(self, block: Any) -> tuple[Part | None, Any]:
        if not isinstance(block, dict):
            return None, block
        btype = block.get("type")
        if btype == "text":
            return TextPart(text=block["text"]), without(block, "text")
        if btype == "thinking":
            signature = block.get("signature")
            if isinstance(signature, str) and signature:
                return (
                    ReasoningPart(text=block["thinking"], opaque=signature, provider="anthropic"),
                    without(block, "thinking", "signature"),
                )
            return (
                ReasoningPart(text=block["thinking"], provider="anthropic"),
                without(block, "thinking"),
            )
        if btype == "redacted_thinking" and isinstance(block.get("data"), str):
            return (
                ReasoningPart(opaque=block["data"], provider="anthropic-redacted"),
                without(block, "data"),
            )
        if btype == "tool_use":
            arguments = dumps(block.get("input")) if "input" in block else "{}"
            return (
                ToolCall(id=str(block["id"]), name=str(block["name"]), arguments=arguments),
                without(block, "id", "name", "input"),
            )
        if btype == "image":
            image, rest = self._image(block)
            return image, rest
        if btype == "compaction":
            # the API's own compaction: kept whole, sent back to Anthropic unchanged
            summary = block.get("content")
            return (
                NativePart(
                    format="anthropic",
                    item_type="compaction",
                    data=msgspec.json.encode(block).decode(),
                    text=summary if isinstance(summary, str) else "",
                ),
                {"type": "compaction"},
            )
        return None, block

    def _usage(self, rec: _Rec, mid: str, at: int | None) -> int | None:
        usage = rec.message.get("usage")
        if not isinstance(usage, dict):
            return at
        message = rec.message
        body = ResponseReceived(
            usage=_usage(usage),
            stop_reason=str(message.get("stop_reason") or ""),
            model=str(message.get("model") or ""),
            response_id=mid[:256],
        )
        time = parse_time(rec.obj.get("timestamp"), rec.where, "timestamp")
        if at is not None:
            entry = self.entries[at]
            assert isinstance(entry, Entry)
            old = entry.body
            assert isinstance(old, ResponseReceived)
            if not body.stop_reason:
                body = msgspec.structs.replace(body, stop_reason=old.stop_reason)
            entry.body = body
            entry.time = time
            return at
        key = f"cc:{rec.uuid}:usage"
        self.entries.append(Entry(body, key, time, {"derived": True}, rec.where))
        return len(self.entries) - 1

    # -- compaction ------------------------------------------------------------------------
    def _compaction(self, rec: _Rec) -> None:
        obj = rec.obj
        raw = dict(obj)
        message = dict(rec.message)
        raw["message"] = message
        content = message.get("content")
        if isinstance(content, str):
            summary = content
            del message["content"]
        else:
            summary = "\n".join(
                str(b.get("text"))
                for b in content or ()
                if isinstance(b, dict) and isinstance(b.get("text"), str)
            )
        meta: Obj = {"line": rec.line, "raw": raw}
        boundary = self.boundary
        self.boundary = None
        before = after = 0
        if boundary is not None:
            meta["boundary"] = {"line": boundary.line, "record": boundary.obj}
            before, after = _compact_tokens(boundary.obj)
        self.entries.append(
            CompactionEntry(
                key=f"cc:{rec.uuid}",
                time=parse_time(obj.get("timestamp"), rec.where, "timestamp"),
                meta=self.sink.attach(meta),
                where=rec.where,
                summary=summary,
                summarizer=_SUMMARIZER,
                tokens_before=before,
                tokens_after=after,
            )
        )

    def _close_boundary(self) -> None:
        """A boundary not followed by its summary record: a compaction with the
        boundary's own text."""
        boundary = self.boundary
        if boundary is None:
            return
        self.boundary = None
        before, after = _compact_tokens(boundary.obj)
        self.entries.append(
            CompactionEntry(
                key=f"cc:{boundary.uuid}",
                time=parse_time(boundary.obj.get("timestamp"), boundary.where, "timestamp"),
                meta=self.sink.attach(
                    {"boundary": {"line": boundary.line, "record": boundary.obj}}
                ),
                where=boundary.where,
                summary=str(boundary.obj.get("content") or ""),
                summarizer=_SUMMARIZER,
                tokens_before=before,
                tokens_after=after,
            )
        )


def _user_text(text: str, notify: bool) -> Body:
    if notify:
        return NotificationAdded(source=_META_SOURCE, text=text)
    return UserMessageAdded(text=text)


def _usage(usage: Obj) -> Usage:
    return Usage(
        input_tokens=count_of(usage.get("input_tokens")),
        output_tokens=count_of(usage.get("output_tokens")),
        cache_read_tokens=count_of(usage.get("cache_read_input_tokens")),
        cache_write_tokens=count_of(usage.get("cache_creation_input_tokens")),
    )


def _compact_tokens(boundary: Obj) -> tuple[int, int]:
    meta = boundary.get("compactMetadata")
    if not isinstance(meta, dict):
        return 0, 0
    return count_of(meta.get("preTokens")), count_of(meta.get("postTokens"))


def _api_error(obj: Obj, text: str) -> ProviderErrorReceived:
    error = obj.get("error")
    error = error if isinstance(error, dict) else {}
    status = error.get("status")
    inner = error.get("error")
    inner = inner if isinstance(inner, dict) else {}
    detail = inner.get("error")
    detail = detail if isinstance(detail, dict) else inner
    message = detail.get("message") or error.get("message") or text
    message = message if isinstance(message, str) else dumps_sorted(message)
    error_type = detail.get("type") or inner.get("type") or ""
    low = message.lower()
    return ProviderErrorReceived(
        status=status
        if isinstance(status, int) and not isinstance(status, bool) and abs(status) < 2**62
        else None,
        error_type=str(error_type)[:1024],
        message=message,
        overflow="prompt is too long" in low or "context window" in low or "context length" in low,
    )


# -- subagent files -----------------------------------------------------------------------
def is_subagent_file(path: Path) -> bool:
    """True for a subagent transcript: ``agent-*.jsonl`` or a file under ``subagents/``."""
    return path.name.startswith("agent-") or path.parent.name == "subagents"


def link_subagents(parsed: Parsed, links: dict[str, dict[str, str]]) -> None:
    """Record which call spawned which subagent (from a main file), and name the
    spawning call in a subagent file's parent link (when seen before).

    Parameters:
        parsed: one parsed Claude Code file.
        links: shared across the files of one run: session id -> agent id -> call id.
    """
    main = parsed.plans[0] if parsed.plans else None
    if main is None:
        return
    parent = main.parent
    if parent is not None and parent.get("kind") == "subagent":
        call = links.get(str(parent.get("session")), {}).get(str(parent.get("agent_id")))
        if call:
            parent["call_id"] = call
        return
    found = links.setdefault(main.natural, {})
    for plan in parsed.plans:
        for entry in plan.entries:
            raw = entry.meta.get("raw")
            if not isinstance(raw, dict):
                continue
            result = raw.get("toolUseResult")
            if not isinstance(result, dict) or not isinstance(result.get("agentId"), str):
                continue
            if isinstance(entry, Entry) and isinstance(entry.body, ToolResultAdded):
                found[result["agentId"]] = entry.body.call_id


# -- export ---------------------------------------------------------------------------------
def export(view: ExportSession) -> bytes:
    """The JSONL file of a session, with its forks and inline sidechains."""
    merged: list[tuple[int, int, int, Any]] = []
    pending = [view]
    number = 0
    while pending:
        current = pending.pop(0)
        pending.extend(current.children)
        restore = _Restorer(current, _Native(current.session, view.session))
        for position, order, record in positioned(current.events, restore):
            merged.append((position, number, order, record))
        number += 1
    merged.sort(key=lambda item: item[:3])
    return write_lines([(position, order, record) for position, _, order, record in merged])


class _Restorer:
    """Rebuilds the records of the event groups of one session."""

    def __init__(self, view: ExportSession, native: _Native) -> None:
        self.view = view
        self.native = native

    def __call__(self, group: list[Event]) -> list[tuple[object, Obj]]:
        return _records(group, self.view, self.native)


def _records(
    group: list[Event],
    view: ExportSession,
    state: _Native,
) -> list[tuple[object, Obj]]:
    event = group[0]
    meta = event.meta
    body = event.body
    if isinstance(body, SessionForked):
        return []
    if isinstance(body, CompactionCommitted) or meta.get("compaction_not_covering"):
        return _compaction_records(event, state)
    if "records" in meta and isinstance(body, AssistantMessageAdded):
        return _assistant_records(body, meta["records"], view)
    raw = meta.get("raw")
    if isinstance(raw, dict):
        if isinstance(body, ProviderErrorReceived):
            return [(meta.get("line"), raw)]
        return [(meta.get("line"), _user_record(raw, [e.body for e in group], view))]
    return state.records(group, view)


def _user_record(raw: Obj, bodies: list[Body], view: ExportSession) -> Obj:
    record = copy.deepcopy(raw)
    message = record.setdefault("message", {})
    pending = list(bodies)
    if "content" not in message:
        message["content"] = text_of(pending[0]) if pending else ""
        return record
    blocks = message["content"]
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or not pending:
            continue
        btype = block.get("type")
        if btype == "text" and "text" not in block:
            blocks[i] = {**block, "text": text_of(pending.pop(0))}
        elif btype == "tool_result" and "tool_use_id" not in block:
            body = pending.pop(0)
            if isinstance(body, ToolResultAdded):
                blocks[i] = _result_block(block, body)
        elif btype == "image" and _image_slot(block):
            body = pending.pop(0)
            if isinstance(body, UserMessageAdded) and body.images:
                blocks[i] = _image_block(block, body.images[0], view)
    return record


def _result_block(rest: Obj, body: ToolResultAdded) -> Obj:
    block = {"tool_use_id": body.call_id, **rest}
    content = rest.get("content")
    if content is None:
        block["content"] = body.output
    elif (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("type") == "text"
        and "text" not in content[0]
    ):
        block["content"] = [{**content[0], "text": body.output}]
    if body.is_error:
        block["is_error"] = True
    return block


def _image_slot(block: Obj) -> bool:
    source = block.get("source")
    return isinstance(source, dict) and (
        (source.get("type") == "base64" and "data" not in source)
        or (source.get("type") == "url" and "url" not in source)
    )


def _image_block(rest: Obj, image: ImagePart, view: ExportSession) -> Obj:
    source = dict(rest.get("source") or {})
    if image.blob is not None:
        source["data"] = base64.b64encode(view.blob(image.blob.hash)).decode()
    else:
        source["url"] = image.url
    return {**rest, "source": source}


def _assistant_records(
    body: AssistantMessageAdded, residuals: list[Obj], view: ExportSession
) -> list[tuple[object, Obj]]:
    parts = list(body.parts)
    out: list[tuple[object, Obj]] = []
    for residual in residuals:
        record = copy.deepcopy(residual["raw"])
        message = record.setdefault("message", {})
        if "content" not in message:
            part = parts.pop(0) if parts else TextPart(text="")
            message["content"] = part.text if isinstance(part, TextPart) else ""
        elif isinstance(message["content"], list):
            blocks = message["content"]
            for i, block in enumerate(blocks):
                if isinstance(block, dict) and parts and _part_slot(block):
                    blocks[i] = _part_block(block, parts.pop(0), view)
        out.append((residual.get("line"), record))
    return out


def _part_slot(block: Obj) -> bool:
    btype = block.get("type")
    return (
        (btype == "text" and "text" not in block)
        or (btype == "thinking" and "thinking" not in block)
        or (btype == "redacted_thinking" and "data" not in block)
        or (btype == "tool_use" and "id" not in block)
        or (btype == "image" and _image_slot(block))
        or (btype == "compaction" and block == {"type": "compaction"})
    )


def _part_block(rest: Obj, part: Part, view: ExportSession) -> Obj:
    if isinstance(part, TextPart):
        return {**rest, "text": part.text}
    if isinstance(part, ReasoningPart):
        if rest.get("type") == "redacted_thinking":
            return {**rest, "data": part.opaque}
        block = {**rest, "thinking": part.text}
        if part.opaque:
            block["signature"] = part.opaque
        return block
    if isinstance(part, ToolCall):
        return {"id": part.id, "name": part.name, "input": decode_or_text(part.arguments), **rest}
    if isinstance(part, ImagePart):
        return _image_block(rest, part, view)
    if isinstance(part, NativePart):
        if part.format == "anthropic":
            kept: Obj = msgspec.json.decode(part.data)
            return kept
        return {
            "type": "text",
            "text": f"[{part.format} {part.item_type} item: opaque to "
            "this format, kept in the turnlog session]",
        }
    return rest


def _compaction_records(event: Event, state: _Native) -> list[tuple[object, Obj]]:
    meta = event.meta
    body = event.body
    summary = body.summary if isinstance(body, CompactionCommitted) else text_of(body)
    out: list[tuple[object, Obj]] = []
    boundary = meta.get("boundary")
    if isinstance(boundary, dict):
        out.append((boundary.get("line"), boundary["record"]))
    raw = meta.get("raw")
    if isinstance(raw, dict):
        record = copy.deepcopy(raw)
        message = record.setdefault("message", {})
        if "content" not in message:
            message["content"] = summary
        out.append((meta.get("line"), record))
    elif not isinstance(boundary, dict):
        out.extend(state.compaction(event, summary))
    return out


class _Native:
    """Records for events that were not imported from Claude Code."""

    def __init__(self, session: str, main: str) -> None:
        self.session = session
        self.main = main
        self.previous: str | None = None
        self.last_assistant: Obj | None = None

    def _uuid(self, event: Event, salt: str = "") -> str:
        digest = blake3.blake3(f"{event.session}#{event.seq}{salt}".encode()).hexdigest()
        return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def _base(self, event: Event, kind: str, salt: str = "") -> Obj:
        uid = self._uuid(event, salt)
        record: Obj = {
            "parentUuid": self.previous,
            "isSidechain": self.session != self.main,
            "userType": "external",
            "sessionId": self.main,
            "type": kind,
            "uuid": uid,
            "timestamp": format_time(event.time),
        }
        self.previous = uid
        return record

    def records(self, group: list[Event], view: ExportSession) -> list[tuple[object, Obj]]:
        out: list[tuple[object, Obj]] = []
        for event in group:
            body = event.body
            if isinstance(body, UserMessageAdded):
                record = self._base(event, "user")
                content: Any = body.text
                if body.images:
                    content = ([{"type": "text", "text": body.text}] if body.text else []) + [
                        _image_block(
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64" if image.blob else "url",
                                    "media_type": image.media_type,
                                },
                            },
                            image,
                            view,
                        )
                        for image in body.images
                    ]
                record["message"] = {"role": "user", "content": content}
            elif isinstance(body, NotificationAdded):
                record = self._base(event, "user")
                record["isMeta"] = True
                record["message"] = {"role": "user", "content": body.text}
            elif isinstance(body, AssistantMessageAdded):
                record = self._base(event, "assistant")
                blocks = [_part_block({"type": _BLOCK_TYPE[type(p)]}, p, view) for p in body.parts]
                for part in blocks:
                    if part["type"] == "image":
                        part["source"] = {
                            "type": "base64",
                            "media_type": "image/png",
                            **part.get("source", {}),
                        }
                record["message"] = {
                    "id": body.response_id or f"msg_{record['uuid']}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.model,
                    "content": blocks,
                }
                self.last_assistant = record
            elif isinstance(body, ToolResultAdded):
                record = self._base(event, "user")
                block: Obj = {
                    "tool_use_id": body.call_id,
                    "type": "tool_result",
                    "content": body.output,
                }
                if body.is_error:
                    block["is_error"] = True
                record["message"] = {"role": "user", "content": [block]}
            elif isinstance(body, ProviderErrorReceived):
                record = self._base(event, "system")
                record.update(
                    subtype="api_error",
                    level="error",
                    error={"status": body.status, "message": body.message},
                )
            elif isinstance(body, ResponseReceived) and self.last_assistant is not None:
                message = self.last_assistant["message"]
                message["usage"] = {
                    "input_tokens": body.usage.input_tokens,
                    "output_tokens": body.usage.output_tokens,
                    "cache_read_input_tokens": body.usage.cache_read_tokens,
                    "cache_creation_input_tokens": body.usage.cache_write_tokens,
                }
                message["stop_reason"] = body.stop_reason or None
                continue
            elif isinstance(body, CompactionCommitted):
                out.extend(self.compaction(event, body.summary))
                continue
            else:
                continue  # not carried by the format (system prompt, tools, policy...)
            out.append((None, record))
        return out

    def compaction(self, event: Event, summary: str) -> list[tuple[object, Obj]]:
        before = self.previous
        boundary = self._base(event, "system", "boundary")
        boundary.update(
            parentUuid=None,
            logicalParentUuid=before,
            subtype="compact_boundary",
            content="Conversation compacted",
            level="info",
        )
        body = event.body
        if isinstance(body, CompactionCommitted):
            boundary["compactMetadata"] = {"trigger": "auto", "preTokens": body.tokens_before}
        record = self._base(event, "user")
        record.update(
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
            message={"role": "user", "content": summary},
        )
        return [(None, boundary), (None, record)]


_BLOCK_TYPE: dict[type[Any], str] = {
    TextPart: "text",
    ReasoningPart: "thinking",
    ToolCall: "tool_use",
    ImagePart: "image",
    NativePart: "compaction",
}


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export, children=True)
