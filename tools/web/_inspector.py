"""What every page of the inspector shows, as plain JSON-ready data.

Theory of operation
-------------------
Each page of `turnlog serve` is one method of `Inspector` that returns a dict of
JSON values; the HTML page renders that dict through its template and
``/api/...`` returns it as it is, so the API is exactly what the page shows.

The inspector reads only through the kernel's public API (`Log.read`,
`Log.sessions`, `Log.verify`, `Replayer.explain`/`replay`/`diff`, `MemoryManager`,
`Recaller`) on a log opened read-only: nothing here can append. A `Packer`
keeps the projections it folded, so the receipts of one session cost one fold
of its lineage plus one incremental pack each; all packing goes through one lock
(the packer's caches are shared by every request the server handles).

Sizes are bounded so that a long session stays fast: the timeline reads one
window of events (`WINDOW` by default), the receipt's decision table one page
(`DECISION_PAGE`), and long texts are cut at `TEXT_LIMIT` characters with the
count of what was left out (the event's own page and the API's event view hold
it all).
"""

from __future__ import annotations

import json
import threading
from bisect import bisect_left
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import msgspec
import turnlog
from turnlog import Packer, Replayer
from turnlog.adapters.providers import RenderError, renderer_for
from turnlog.events import (
    EVENT_KINDS,
    AssistantMessageAdded,
    BlobRef,
    CompactionCommitted,
    Event,
    NotificationAdded,
    ReasoningPart,
    RecallAdded,
    RequestIssued,
    ResponseReceived,
    SessionForked,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
    event_to_json,
)
from turnlog.memories import MEMORY_SECTION, MemoryManager, Recaller
from turnlog.packing import DECISIONS, SUMMARY_SECTION, Packed

from ..summary import expiry, format_size, format_time, summarize
from ..terminal import visible

__all__ = ["DECISION_PAGE", "TEXT_LIMIT", "WINDOW", "Inspector", "NotFoundError", "session_href"]

#: Events per timeline window.
WINDOW = 200
#: The most events one timeline window may ask for.
MAX_WINDOW = 2000
#: Decisions per page of a receipt.
DECISION_PAGE = 500
#: Characters of one text shown on a page (the rest is counted).
TEXT_LIMIT = 20_000
#: Sessions per page of the index.
SESSION_PAGE = 200
#: Receipts whose packs are kept (re-reading a receipt or paging its decisions).
_KEPT_RECEIPTS = 8


class NotFoundError(Exception):
    """A session, event or request the store does not hold (HTTP 404)."""


class BadRequestError(Exception):
    """A query parameter out of range (HTTP 400)."""


def session_href(session: str, *rest: object) -> str:
    """The page path of a session (every segment percent-encoded, ``/`` included)."""
    return "/sessions/" + "/".join(quote(str(part), safe="") for part in (session, *rest))


def _cut(text: str, limit: int = TEXT_LIMIT) -> dict[str, Any]:
    """``{"text": ..., "more": n}``: the text cut at ``limit`` characters."""
    if len(text) <= limit:
        return {"text": text, "more": 0}
    return {"text": text[:limit], "more": len(text) - limit}


def _blob(ref: BlobRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {
        "hash": ref.hash,
        "size": ref.size,
        "size_text": format_size(ref.size),
        "media_type": ref.media_type,
    }


def _call(call: ToolCall, limit: int) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": _cut(call.arguments, limit)}


def _parts(parts: Iterable[Any], limit: int) -> dict[str, Any]:
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    reasoning = [p.text for p in parts if isinstance(p, ReasoningPart) and p.text]
    return {
        "text": _cut("".join(texts), limit),
        "reasoning": _cut("\n".join(reasoning), limit) if reasoning else None,
        "calls": [_call(p, limit) for p in parts if isinstance(p, ToolCall)],
    }


def event_view(event: Event, *, limit: int = 600) -> dict[str, Any]:
    """One event as a timeline row: what it is, its text (cut at ``limit``) and links."""
    body = event.body
    row: dict[str, Any] = {
        "seq": event.seq,
        "kind": event.kind,
        "time": event.time,
        "when": format_time(event.time),
        "summary": summarize(event, 160),
        "hash": event.hash.hex(),
        "key": event.key,
        "href": session_href(event.session, "events", event.seq),
        "links": [],
        "text": None,
        "blob": None,
        "calls": [],
        "reasoning": None,
    }
    links: list[dict[str, str]] = row["links"]
    if isinstance(body, UserMessageAdded):
        row["text"] = _cut(body.text, limit)
        row["blob"] = _blob(body.blob)
    elif isinstance(body, AssistantMessageAdded):
        row.update(_parts(body.parts, limit))
        row["model"] = body.model
    elif isinstance(body, ToolResultAdded):
        size = body.blob.size if body.blob is not None else len(body.output.encode())
        row["tool"] = {
            "name": body.tool_name,
            "call_id": body.call_id,
            "is_error": body.is_error,
            "exit_code": body.exit_code,
            "size": size,
            "size_text": format_size(size),
        }
        row["text"] = _cut(body.output, limit)
        row["blob"] = _blob(body.blob)
    elif isinstance(body, NotificationAdded):
        row["text"] = _cut(body.text, limit)
        row["blob"] = _blob(body.blob)
    elif isinstance(body, SystemSectionSet):
        row["section"] = {"name": body.name, "position": body.position, "removed": not body.text}
        row["text"] = _cut(body.text, limit)
    elif isinstance(body, CompactionCommitted):
        row["compaction"] = {
            "first_seq": body.first_seq,
            "last_seq": body.last_seq,
            "level": body.level,
            "reason": body.reason,
            "summarizer": body.summarizer,
            "tokens_before": body.tokens_before,
            "tokens_after": body.tokens_after,
        }
        row["text"] = _cut(body.summary, limit)
        links.append(
            {
                "label": f"covers {body.first_seq}-{body.last_seq}",
                "href": session_href(event.session) + f"?from={body.first_seq}",
            }
        )
        links.append({"label": "summaries", "href": session_href(event.session, "summaries")})
    elif isinstance(body, RequestIssued):
        row["request"] = {
            "head_seq": body.head_seq,
            "tokens": body.tokens,
            "format": body.format,
            "model": body.model,
            "recovery": body.recovery,
            "prompt_hash": body.prompt_hash,
        }
        links.append(
            {"label": "receipt", "href": session_href(event.session, "requests", event.seq)}
        )
    elif isinstance(body, ResponseReceived):
        row["usage"] = msgspec.to_builtins(body.usage)
        row["response"] = {
            "request_seq": body.request_seq,
            "stop_reason": body.stop_reason,
            "model": body.model,
        }
        if body.request_seq is not None:
            links.append(
                {
                    "label": f"request {body.request_seq}",
                    "href": session_href(event.session, "requests", body.request_seq),
                }
            )
    elif isinstance(body, SessionForked):
        links.append(
            {
                "label": f"from {body.from_session}#{body.from_seq}",
                "href": session_href(body.from_session, "events", body.from_seq),
            }
        )
    elif isinstance(body, RecallAdded):
        row["recall"] = {"query": body.query, "hits": len(body.hits), "searcher": body.searcher}
    return row


def _decision(d: turnlog.packing.Decision) -> dict[str, Any]:
    return {
        "pos": d.pos,
        "session": d.session,
        "seq": d.seq,
        "kind": d.kind,
        "decision": d.decision,
        "rule": d.rule,
        "detail": d.detail,
        "tokens": d.tokens,
        "original_tokens": d.original_tokens,
        "href": session_href(d.session, "events", d.seq),
    }


class Inspector:
    """The data of every page, read from ``log`` (which it never appends to).

    Parameters:
        log: the log, opened read-only.
    """

    def __init__(self, log: turnlog.Log) -> None:
        self.log = log
        self.packer = Packer(log)
        self.replayer = Replayer(self.packer)
        self._lock = threading.RLock()
        self._stats: dict[str, tuple[bytes, dict[str, Any]]] = {}
        self._managers: dict[str, MemoryManager] = {}
        self._recaller = Recaller(log)
        self._receipts: OrderedDict[tuple[str, int], tuple[Packed, dict[str, Any] | None]] = (
            OrderedDict()
        )

    # -- helpers -----------------------------------------------------------------------
    def _head(self, session: str) -> turnlog.log.Head:
        try:
            head = self.log.head(session)
        except turnlog.errors.InvalidEventError as exc:  # not a usable session id
            raise NotFoundError(str(exc)) from None
        if head is None:
            raise NotFoundError(f"no session {session!r} in this store")
        return head

    def _request(self, session: str, seq: int) -> RequestIssued:
        head = self._head(session)
        if not 0 <= seq <= head.seq:
            raise NotFoundError(f"{session!r} has no event {seq} (its head is {head.seq})")
        body = self.log.get(session, seq).body
        if not isinstance(body, RequestIssued):
            raise NotFoundError(f"{session}#{seq} is not a request record")
        return body

    def _neighbour(self, session: str, seq: int, step: int) -> int | None:
        """The seq of the request record before (``step`` -1) or after (+1) ``seq``,
        read a window at a time (a long session is not read whole for it)."""
        head = self._head(session)
        window = 512
        at = seq
        while True:
            start, stop = (
                (max(0, at - window), at)
                if step < 0
                else (at + 1, min(head.seq + 1, at + 1 + window))
            )
            if start >= stop:
                return None
            found = [e.seq for e in self.log.read(session, start, stop, kinds=["request"])]
            if found:
                return found[-1] if step < 0 else found[0]
            at = start if step < 0 else stop - 1

    def _packed(self, session: str, seq: int) -> Packed:
        with self._lock:
            return self.replayer.explain(session, seq)

    def _session_stats(self, head: turnlog.log.Head) -> dict[str, Any]:
        """Counts, times, model and verify status of a session, cached by its head."""
        cached = self._stats.get(head.session)
        if cached is not None and cached[0] == head.hash:
            return cached[1]
        requests = 0
        model = ""
        first = last = None
        for event in self.log.read(head.session):
            if event.time is not None:
                first = event.time if first is None else first
                last = event.time
            body = event.body
            if isinstance(body, RequestIssued):
                requests += 1
                model = body.model or model
            elif isinstance(body, (AssistantMessageAdded, ResponseReceived)) and body.model:
                model = body.model if not requests else model
        report = self.log.verify(head.session)
        stats = {
            "requests": requests,
            "model": model,
            "first_time": first,
            "first": format_time(first),
            "last_time": last,
            "last": format_time(last),
            "verify": {
                "ok": report.ok,
                "problem": None if report.problem is None else str(report.problem),
            },
        }
        self._stats[head.session] = (head.hash, stats)
        return stats

    # -- pages -------------------------------------------------------------------------
    def sessions(self, *, prefix: str = "", after: str = "") -> dict[str, Any]:
        """The index: every session whose id starts with ``prefix``, a page at a time
        (``after``: the last id of the previous page)."""
        heads = [
            h for h in self.log.sessions() if h.session.startswith(prefix) and h.session > after
        ]
        page, more = heads[:SESSION_PAGE], len(heads) > SESSION_PAGE
        rows = []
        for h in page:
            row = {
                "session": h.session,
                "head_seq": h.seq,
                "events": h.seq + 1,
                "head_hash": h.hash.hex(),
                "href": session_href(h.session),
            }
            row.update(self._session_stats(h))
            rows.append(row)
        return {
            "store": turnlog.stores.hide_credentials(self.log.store.location),
            "prefix": prefix,
            "sessions": rows,
            "next_after": page[-1].session if more else None,
        }

    def timeline(
        self,
        session: str,
        *,
        start: int | None = None,
        limit: int = WINDOW,
        kinds: Sequence[str] = (),
    ) -> dict[str, Any]:
        """One window of a session's events (the latest when ``start`` is None), of the
        given ``kinds`` only when any are given."""
        head = self._head(session)
        if not 1 <= limit <= MAX_WINDOW:
            raise BadRequestError(f"limit must be 1 to {MAX_WINDOW}, found {limit}")
        if start is not None and start < 0:
            raise BadRequestError(f"from must be >= 0, found {start}")
        unknown = sorted(set(kinds) - set(EVENT_KINDS))
        if unknown:
            raise BadRequestError(
                f"unknown event kind {unknown[0]!r}; the kinds are {', '.join(sorted(EVENT_KINDS))}"
            )
        if kinds:
            # A filtered window: the matching events are not contiguous, so page by
            # position among them.
            matching = self.log.read(session, kinds=list(kinds))
            seqs = [e.seq for e in matching]
            first = max(0, len(seqs) - limit) if start is None else bisect_left(seqs, start)
            events = matching[first : first + limit]
            start = events[0].seq if events else (start or 0)
            prev_start = seqs[max(0, first - limit)] if first > 0 else None
            next_start = seqs[first + limit] if first + limit < len(seqs) else None
            latest = first + limit >= len(seqs)
        else:
            if start is None:
                start = max(0, head.seq + 1 - limit)
            stop = min(head.seq + 1, start + limit)
            events = self.log.read(session, start, stop) if start <= head.seq else []
            prev_start = max(0, start - limit) if start > 0 else None
            next_start = stop if stop <= head.seq else None
            latest = stop > head.seq
        follow = None
        if latest:
            follow = (
                "/api"
                + session_href(session, "follow")
                + "?"
                + urlencode([("after", head.seq), *(("kind", k) for k in kinds)])
            )
        return {
            "session": session,
            "head_seq": head.seq,
            "head_hash": head.hash.hex(),
            "events_total": head.seq + 1,
            "start": start,
            "limit": limit,
            "kinds": list(kinds),
            "all_kinds": sorted(EVENT_KINDS),
            "prev_start": prev_start,
            "next_start": next_start,
            "events": [event_view(e) for e in events],
            "follow": follow,
        }

    def event(self, session: str, seq: int) -> dict[str, Any]:
        """One event in full: its row, its JSON record and its blob's text."""
        head = self._head(session)
        if not 0 <= seq <= head.seq:
            raise NotFoundError(f"{session!r} has no event {seq} (its head is {head.seq})")
        event = self.log.get(session, seq)
        record = json.loads(event_to_json(event))
        row = event_view(event, limit=TEXT_LIMIT)
        blob = getattr(event.body, "blob", None)
        blob_text = None
        if isinstance(blob, BlobRef):
            try:
                data = self.log.blob(blob)
            except turnlog.errors.BlobNotFoundError as exc:
                blob_text = {"text": f"(blob missing: {exc})", "more": 0}
            else:
                blob_text = _cut(data.decode("utf-8", "replace"))
        return {
            "session": session,
            "seq": seq,
            "head_seq": head.seq,
            "event": row,
            "record": record,
            "record_text": _cut(json.dumps(record, indent=2, ensure_ascii=False)),
            "blob_text": blob_text,
        }

    def receipt(
        self, session: str, seq: int, *, decision: str = "", kind: str = "", page: int = 0
    ) -> dict[str, Any]:
        """The request receipt: the prompt as sent, the budget, the decisions (one page,
        filtered by ``decision`` and ``kind``), stages, cache breakpoints, the prefix
        shared with the previous request and the rendered body."""
        if decision and decision not in DECISIONS:
            raise BadRequestError(
                f"unknown decision {decision!r}; the decisions are {', '.join(DECISIONS)}"
            )
        if kind and kind not in EVENT_KINDS:
            raise BadRequestError(
                f"unknown event kind {kind!r}; the kinds are {', '.join(sorted(EVENT_KINDS))}"
            )
        request = self._request(session, seq)
        before = self._neighbour(session, seq, -1)
        after = self._neighbour(session, seq, +1)
        with self._lock:
            packed, previous = self._receipt_packs(session, seq, before)
        decisions = packed.decisions
        by_pos = {d.pos: d for d in decisions}
        prompt = packed.prompt
        marks = {b.index: b.reason for b in prompt.breakpoints if b.at == "message"}
        messages = []
        for i, (message, tokens) in enumerate(
            zip(prompt.messages, packed.message_tokens, strict=True)
        ):
            sources = []
            for pos in message.source:
                d = by_pos.get(pos)
                if d is not None:
                    sources.append(
                        {
                            "session": d.session,
                            "seq": d.seq,
                            "kind": d.kind,
                            "decision": d.decision,
                            "href": session_href(d.session, "events", d.seq),
                        }
                    )
            row = {
                "index": i,
                "role": message.role,
                "tokens": tokens,
                "tool_call_id": message.tool_call_id,
                "name": message.name,
                "is_error": message.is_error,
                "sources": sources,
                "breakpoint": marks.get(i),
            }
            row.update(_parts(message.parts, TEXT_LIMIT))
            messages.append(row)
        counts = Counter(d.decision for d in decisions)
        kinds = Counter(d.kind for d in decisions)
        chosen = [
            d
            for d in decisions
            if (not decision or d.decision == decision) and (not kind or d.kind == kind)
        ]
        pages = max(1, -(-len(chosen) // DECISION_PAGE))
        if not 0 <= page < pages:
            raise BadRequestError(f"page must be 0 to {pages - 1}, found {page}")
        shown = chosen[page * DECISION_PAGE : (page + 1) * DECISION_PAGE]
        budget = msgspec.to_builtins(packed.budget)
        biggest = max(packed.message_tokens, default=0)
        return {
            "session": session,
            "seq": seq,
            "request": {
                "head_seq": request.head_seq,
                "model": request.model,
                "format": request.format,
                "tokens": request.tokens,
                "prompt_hash": request.prompt_hash,
                "policy_hash": request.policy_hash,
                "tokenizer": request.tokenizer,
                "recovery": request.recovery,
                "rendered_hash": request.rendered_hash,
                "head_href": session_href(session, "events", request.head_seq),
            },
            "tokens": packed.tokens,
            "budget": budget,
            "bar": _budget_bar(packed),
            "pressure": packed.pressure,
            "pressure_before": packed.pressure_before,
            "thresholds": list(packed.thresholds),
            "compaction_due": packed.compaction_due,
            "recovery": packed.recovery,
            "rules": packed.rules,
            "system": [
                {"name": s.name, "tokens": t, **_cut(s.text)}
                for s, t in zip(prompt.system, packed.section_tokens, strict=True)
            ],
            "tools": [
                {"name": t.name, "description": _cut(t.description, 600)["text"]}
                for t in prompt.tools
            ],
            "messages": messages,
            "largest_message": biggest,
            "stages": [msgspec.to_builtins(s) for s in packed.stages],
            "breakpoints": [msgspec.to_builtins(b) for b in prompt.breakpoints],
            "previous": previous,
            "decision_counts": dict(sorted(counts.items(), key=lambda kv: kv[0])),
            "kind_counts": dict(sorted(kinds.items(), key=lambda kv: kv[0])),
            "filter": {
                "decision": decision,
                "kind": kind,
                "page": page,
                "pages": pages,
                "matching": len(chosen),
            },
            "decisions": [_decision(d) for d in shown],
            "body": {
                "format": request.format if request.rendered_hash else "neutral",
                "href": "/api" + session_href(session, "requests", seq, "body"),
            },
            "replay_href": "/api" + session_href(session, "requests", seq, "replay"),
            "requests": {"prev": before, "next": after},
        }

    def _receipt_packs(
        self, session: str, seq: int, before: int | None
    ) -> tuple[Packed, dict[str, Any] | None]:
        """The request re-packed and its prefix shared with the previous request, kept
        for the last few receipts (a record never changes, so neither do they)."""
        key = (session, seq)
        found = self._receipts.get(key)
        if found is not None:
            self._receipts.move_to_end(key)
            return found
        previous = None
        # The previous request first: the packer then grows its projection to this one
        # instead of folding the lineage again. Its decisions are never built.
        earlier = self._packed(session, before) if before is not None else None
        packed = self._packed(session, seq)
        if earlier is not None:
            previous = {
                "seq": before,
                **_shared_prefix(earlier, packed),
                "href": session_href(session, "requests", before),
                "diff_href": session_href(session, "diff", before, seq),
            }
        self._receipts[key] = (packed, previous)
        while len(self._receipts) > _KEPT_RECEIPTS:
            self._receipts.popitem(last=False)
        return packed, previous

    def body(self, session: str, seq: int) -> dict[str, Any]:
        """The request body as the provider got it (the neutral prompt for a request
        recorded without a provider format), indented; the receipt loads it on demand."""
        request = self._request(session, seq)
        with self._lock:
            packed, _ = self._receipt_packs(session, seq, self._neighbour(session, seq, -1))
        return {"session": session, "seq": seq, **self._body(request, packed)}

    def _body(self, request: RequestIssued, packed: Packed) -> dict[str, Any]:
        try:
            render = renderer_for(request, blobs=self.log.blob)
        except RenderError as exc:
            return {"format": request.format, "error": str(exc), "text": "", "more": 0, "bytes": 0}
        data = render(packed.prompt) if render is not None else msgspec.json.encode(packed.prompt)
        try:
            pretty = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            pretty = data.decode("utf-8", "replace")
        # Shown as text: control and bidi characters as escapes, like every page.
        return {
            "format": request.format if render is not None else "neutral",
            "bytes": len(data),
            "error": "",
            **_cut(visible(pretty), 200_000),
        }

    def replay(self, session: str, seq: int) -> dict[str, Any]:
        """Re-pack a recorded request and compare it with its record."""
        request = self._request(session, seq)
        try:
            render = renderer_for(request, blobs=self.log.blob)
        except RenderError as exc:
            return {
                "session": session,
                "request_seq": seq,
                "ok": False,
                "recorded_hash": request.prompt_hash,
                "replayed_hash": "",
                "difference": f"cannot render the recorded format: {exc}",
            }
        with self._lock:
            result = self.replayer.replay(session, seq, render=render)
        out: dict[str, Any] = msgspec.to_builtins(result)
        return out

    def diff(self, session: str, a: int, b: int) -> dict[str, Any]:
        """Two requests compared: shared cache prefix, changed decisions."""
        self._request(session, a)
        self._request(session, b)
        with self._lock:
            diff = self.replayer.diff(session, a, b)
        out: dict[str, Any] = msgspec.to_builtins(diff)
        out["session"] = session
        out["changes"] = [
            {**c, "href": session_href(session, "events", c["seq"])} for c in out["changes"]
        ]
        out["a_href"] = session_href(session, "requests", a)
        out["b_href"] = session_href(session, "requests", b)
        out["pairs"] = {
            "prev": self._neighbour(session, a, -1),
            "next": self._neighbour(session, b, +1),
        }
        return out

    def _latest_decisions(self, session: str) -> tuple[int | None, dict[int, dict[str, Any]]]:
        """The latest request's seq and its decisions of this session's events by seq."""
        latest = self._neighbour(session, self._head(session).seq + 1, -1)
        if latest is None:
            return None, {}
        with self._lock:
            packed = self._packed(session, latest)
        return latest, {d.seq: _decision(d) for d in packed.decisions if d.session == session}

    def summaries(self, session: str) -> dict[str, Any]:
        """The summary tree: each compaction with what it covers and its children, and
        what the latest request showed of it."""
        self._head(session)
        latest, shown = self._latest_decisions(session)
        nodes: dict[int, dict[str, Any]] = {}
        for event in self.log.read(session, kinds=["compaction"]):
            body = event.body
            assert isinstance(body, CompactionCommitted)
            nodes[event.seq] = {
                "seq": event.seq,
                "level": body.level,
                "first_seq": body.first_seq,
                "last_seq": body.last_seq,
                "reason": body.reason,
                "summarizer": body.summarizer,
                "model": body.model,
                "tokens_before": body.tokens_before,
                "tokens_after": body.tokens_after,
                "children": list(body.children),
                "parent": None,
                "when": format_time(event.time),
                "shown": shown.get(event.seq),
                **_cut(body.summary),
                "href": session_href(session, "events", event.seq),
                "covers_href": session_href(session) + f"?from={body.first_seq}",
            }
        for seq, node in nodes.items():
            for child in node["children"]:
                if child in nodes:
                    nodes[child]["parent"] = seq
        roots = sorted(
            (seq for seq, node in nodes.items() if node["parent"] is None),
            key=lambda s: (-nodes[s]["level"], s),
        )

        def tree(seq: int, depth: int) -> dict[str, Any]:
            node = nodes[seq]
            nested = [
                tree(c, depth + 1)
                for c in node["children"]
                if c in nodes and nodes[c]["parent"] == seq and depth < 16
            ]
            return {**node, "nested": nested}

        levels = Counter(node["level"] for node in nodes.values())
        section = ""
        if latest is not None:
            with self._lock:
                packed = self._packed(session, latest)
            section = next((s.text for s in packed.prompt.system if s.name == SUMMARY_SECTION), "")
        return {
            "session": session,
            "latest_request": latest,
            "latest_href": session_href(session, "requests", latest)
            if latest is not None
            else None,
            "levels": {f"L{k}": v for k, v in sorted(levels.items())},
            "nodes": [nodes[s] for s in sorted(nodes)],
            "roots": roots,
            "tree": [tree(s, 0) for s in roots],
            "section": _cut(section),
        }

    def memories(self, session: str, *, query: str = "", k: int = 10) -> dict[str, Any]:
        """The memories of the session's memory session, the block in force and its
        history, the recall events and what the latest request did with them, and
        the results of ``query`` (searched, never committed)."""
        self._head(session)
        memory_session = f"{session}-memories"
        manager = self._managers.setdefault(memory_session, MemoryManager(self.log, memory_session))
        has_memories = self.log.head(memory_session) is not None
        memory_book = manager.book()
        book = memory_book.memories(include_expired=True) if has_memories else []
        latest, shown = self._latest_decisions(session)
        history = []
        recalls = []
        for event in self.log.read(session, kinds=["system", "recall"]):
            body = event.body
            if isinstance(body, SystemSectionSet) and body.name == MEMORY_SECTION:
                history.append(
                    {
                        "seq": event.seq,
                        "when": format_time(event.time),
                        "chars": len(body.text),
                        "removed": not body.text,
                        "shown": shown.get(event.seq),
                        **_cut(body.text),
                        "href": session_href(session, "events", event.seq),
                    }
                )
            elif isinstance(body, RecallAdded):
                recalls.append(
                    {
                        "seq": event.seq,
                        "when": format_time(event.time),
                        "query": body.query,
                        "searcher": body.searcher,
                        "shown": shown.get(event.seq),
                        "href": session_href(session, "events", event.seq),
                        "hits": [
                            {
                                "session": h.session,
                                "seq": h.seq,
                                "score": h.score,
                                **_cut(h.text, 600),
                                "href": session_href(h.session, "events", h.seq),
                            }
                            for h in body.hits
                        ],
                    }
                )
        results = None
        if query:
            if not 1 <= k <= 100:
                raise BadRequestError(f"k must be 1 to 100, found {k}")
            sessions = [h.session for h in self.log.sessions()]
            results = [
                {
                    "session": h.session,
                    "seq": h.seq,
                    "score": h.score,
                    **_cut(h.text, 600),
                    "href": session_href(h.session, "events", h.seq),
                }
                for h in self._recaller.search(query, sessions=sessions, k=k)
            ]
        return {
            "session": session,
            "memory_session": memory_session,
            "memory_session_exists": has_memories,
            "memories": [
                {
                    **msgspec.to_builtins(m),
                    "changed": format_time(m.changed_time),
                    "lapsed": m.expired(memory_book.head, None),
                    "expires": expiry(m, memory_book.head),
                }
                for m in book
            ],
            "block_in_force": _cut(manager.block_in_force(session)),
            "block_history": history,
            "recalls": recalls,
            "latest_request": latest,
            "query": query,
            "results": results,
        }

    def follow(
        self, session: str, after: int, *, wait: float, kinds: Sequence[str] = (), limit: int = 200
    ) -> tuple[list[dict[str, Any]], int]:
        """The events appended after ``after`` (of ``kinds`` only, when given), waiting
        up to ``wait`` seconds for the first (`Log.follow`), and the last seq seen."""
        if after < -1:
            raise BadRequestError(f"after must be >= -1, found {after}")
        head = self._head(session)
        if after > head.seq:  # Log.follow would refuse it: what fills the gap is unknown
            raise BadRequestError(
                f"after {after} is past the head of {session!r} (seq "
                f"{head.seq}); the store holds fewer events than the client "
                "saw (restored from a backup?): reload the session"
            )
        events = []
        for event in self.log.follow(session, after, timeout=wait, limit=limit):
            after = event.seq
            if not kinds or event.kind in kinds:
                events.append(event_view(event))
        return events, after


def _shared_prefix(a: Packed, b: Packed) -> dict[str, Any]:
    """What prompt ``b`` shares with prompt ``a`` from the start, as `Replayer.diff` counts
    it (the same system and tools, then equal messages in order), without building
    either pack's decisions."""
    system_changed = a.prompt.system != b.prompt.system
    tools_changed = a.prompt.tools != b.prompt.tools
    messages = tokens = 0
    if not system_changed and not tools_changed:
        tokens = sum(a.section_tokens) + a.budget.tools
        for ma, mb, ta in zip(a.prompt.messages, b.prompt.messages, a.message_tokens, strict=False):
            if ma != mb:
                break
            messages += 1
            tokens += ta
    return {
        "shared_messages": messages,
        "shared_tokens": tokens,
        "system_changed": system_changed,
        "tools_changed": tools_changed,
    }


def _budget_bar(packed: Packed) -> dict[str, Any]:
    """The prompt's parts and the budget's levels as percentages of the window."""
    b = packed.budget
    window = max(b.window, 1)
    history = max(0, packed.tokens - b.system - b.tools - b.summary)

    def pct(tokens: int) -> float:
        return round(100 * tokens / window, 3)

    return {
        "window": b.window,
        "parts": [
            {"name": name, "tokens": tokens, "pct": pct(tokens)}
            for name, tokens in (
                ("system", b.system),
                ("tools", b.tools),
                ("summary", b.summary),
                ("history", history),
            )
        ],
        "levels": [
            {"name": name, "tokens": tokens, "pct": pct(tokens)}
            for name, tokens in (
                ("warning", b.warning),
                ("compact", b.compact),
                ("blocking", b.blocking),
                ("usable", b.usable),
            )
        ],
        "reserve_pct": pct(b.output_reserve + b.safety_margin),
    }
