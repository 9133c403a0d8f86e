"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Theory of operation
-------------------
Every line is ``{timestamp, type, payload}``. ``response_item`` lines are
Responses API items and the source of truth for the conversation; they are
mapped by `openai_responses.ItemMapper` (consecutive model items merge into
one ``AssistantMessageAdded``). The first user messages are usually context
the CLI injected rather than what the human typed: ``<environment_context>``
and ``# AGENTS.md instructions`` / ``<user_instructions>`` messages become
``NotificationAdded`` (sources ``codex/environment_context`` and
``codex/agents_md``), developer messages ``codex/developer``.

``event_msg`` lines repeat user and agent messages for the UI; they are kept
in meta only, so no text is doubled. ``token_count`` lines become
``ResponseReceived`` (last-turn usage, with the model of the current
``turn_context``) when the cumulative total moved; a token count is written
just before the items of the response it measures, so its event is placed
after that response's assistant message (export restores line order).
``session_meta`` and ``turn_context`` are kept in meta; a ``base_instructions``
text in ``session_meta`` (newer CLIs) sets the ``codex.base_instructions``
system section. A ``compacted`` line becomes a compaction.

Keys are ``cx:<line>`` (``cx:<line>:<i>`` for the i-th event of a line).
"""

from __future__ import annotations

import copy
from pathlib import Path

import msgspec
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    CompactionCommitted,
    Event,
    NotificationAdded,
    ProviderErrorReceived,
    ResponseReceived,
    SystemSectionSet,
    UserMessageAdded,
)

from ._openai_responses import ItemMapper, usage_of
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
    format_time,
    get_dict,
    get_str,
    kind_of,
    parse_time,
    positioned,
    session_slug,
    write_lines,
)

__all__ = ["FORMAT", "NAME", "export", "parse"]

NAME = "codex"

_INJECTED = (
    ("<environment_context>", "codex/environment_context"),
    ("# AGENTS.md instructions", "codex/agents_md"),
    ("<user_instructions>", "codex/agents_md"),
)


def _classify(role: str, text: str) -> Body:
    if role == "user":
        head = text.lstrip()
        for prefix, source in _INJECTED:
            if head.startswith(prefix):
                return NotificationAdded(source=source, text=text)
        return UserMessageAdded(text=text)
    return NotificationAdded(source=f"codex/{role}"[:1024], text=text)


class _State:
    def __init__(self) -> None:
        self.entries: list[Entry | CompactionEntry] = []
        self.sink = RecordSink(NAME)
        self.mapper = ItemMapper()
        self.run: Entry | None = None
        self.usage: Entry | None = None  # a token count waiting for its response
        self.model = ""
        self.total: object = None

    def close_run(self) -> None:
        self.run = None
        if self.usage is not None:
            self.entries.append(self.usage)
            self.usage = None


def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map one rollout file to a plan.

    Raises:
        BadRecord: a malformed line (unless ``skip_bad``).
    """
    state = _State()
    skipped: list[SkippedRecord] = []
    session = ""
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            try:
                record = msgspec.json.decode(raw)
            except JSON_ERRORS as exc:
                raise BadRecord(where, "", f"not valid JSON ({exc})") from None
            if not isinstance(record, dict):
                raise BadRecord(where, "", f"expected a JSON object, found {kind_of(record)}")
            found = _line(state, record, number, where)
        except BadRecord as exc:
            if not skip_bad:
                raise
            skipped.append(SkippedRecord(source, exc.where, exc.field, exc.reason))
            # Kept verbatim, so that an export gives the file back.
            state.sink.hold({"line": number, "text": raw.decode("utf-8", errors="replace")})
            continue
        session = session or found
    state.close_run()
    state.sink.finish(state.entries, key="cx:records", time=None, where="end of file")
    if not session:
        stem = Path(source).stem
        session = stem[-36:] if stem.startswith("rollout-") and len(stem) > 36 else stem
    return Parsed(
        format=NAME,
        plans=[Plan(natural=session_slug(session), entries=state.entries)],
        skipped=skipped,
    )


def _line(state: _State, record: Obj, number: int, where: str) -> str:
    """Map one line; returns the session id when the line names it."""
    kind = get_str(record, "type", where, "type")
    time = parse_time(record.get("timestamp"), where, "timestamp")
    payload = record.get("payload")
    if kind in ("session_meta", "turn_context", "response_item", "event_msg", "compacted"):
        payload = get_dict(record, "payload", where, "payload")
    else:
        state.sink.hold({"line": number, "record": record})
        return ""
    if kind == "session_meta":
        _session_meta(state, record, payload, number, where, time)
        ident = payload.get("id")
        return ident if isinstance(ident, str) else ""
    if kind == "turn_context":
        model = payload.get("model")
        state.model = model if isinstance(model, str) else state.model
        state.sink.hold({"line": number, "record": record})
    elif kind == "response_item":
        _item(state, record, payload, number, where, time)
    elif kind == "event_msg":
        _event(state, record, payload, number, where, time)
    else:  # compacted
        summary = get_str(payload, "message", where, "payload.message", optional=True)
        state.close_run()
        raw = copy.deepcopy(record)
        raw["payload"].pop("message", None)
        state.entries.append(
            CompactionEntry(
                key=f"cx:{number}",
                time=time,
                meta=state.sink.attach({"line": number, "raw": raw}),
                where=where,
                summary=summary,
                summarizer="codex",
            )
        )
    return ""


def _session_meta(
    state: _State, record: Obj, payload: Obj, number: int, where: str, time: int | None
) -> None:
    base = payload.get("base_instructions")
    text = base.get("text") if isinstance(base, dict) else base
    if not isinstance(text, str) or not text:
        state.sink.hold({"line": number, "record": record})
        return
    raw = copy.deepcopy(record)
    if isinstance(base, dict):
        raw["payload"]["base_instructions"] = {k: v for k, v in base.items() if k != "text"}
    else:
        del raw["payload"]["base_instructions"]
    state.entries.append(
        Entry(
            SystemSectionSet(name="codex.base_instructions", text=text),
            f"cx:{number}",
            time,
            state.sink.attach({"line": number, "raw": raw}),
            where,
        )
    )


def _item(state: _State, record: Obj, item: Obj, number: int, where: str, time: int | None) -> None:
    mapper = state.mapper
    if mapper.is_model_item(item):
        parts, rest = mapper.model_parts(item, where, "payload")
        residual = {"line": number, "raw": {**record, "payload": rest}}
        run = state.run
        if run is not None and not mapper.starts_message(item):
            body = run.body
            assert isinstance(body, AssistantMessageAdded)
            run.body = msgspec.structs.replace(body, parts=body.parts + tuple(parts))
            run.meta["records"].append(residual)
            return
        model = state.model[:1024]
        state.run = Entry(
            AssistantMessageAdded(parts=tuple(parts), model=model),
            f"cx:{number}",
            time,
            state.sink.attach({"records": [residual]}),
            where,
        )
        state.entries.append(state.run)
        return
    mapped = mapper.input_bodies(item, where, "payload", _classify)
    if mapped is None or not mapped[0]:
        state.sink.hold({"line": number, "record": record})
        return
    state.close_run()
    bodies, rest = mapped
    raw = {**record, "payload": rest}
    for i, body in enumerate(bodies):
        meta: Obj = {"line": number, "raw": raw} if i == 0 else {"cont": True}
        state.entries.append(
            Entry(
                body,
                f"cx:{number}:{i}" if len(bodies) > 1 else f"cx:{number}",
                time,
                state.sink.attach(meta),
                where,
            )
        )


def _event(
    state: _State, record: Obj, payload: Obj, number: int, where: str, time: int | None
) -> None:
    if payload.get("type") in ("error", "stream_error") and isinstance(payload.get("message"), str):
        text = payload["message"]
        low = text.lower()
        state.entries.append(
            Entry(
                ProviderErrorReceived(
                    error_type=str(payload["type"]),
                    message=text,
                    overflow="context window" in low or "context length" in low,
                ),
                f"cx:{number}",
                time,
                state.sink.attach({"line": number, "raw": record}),
                where,
            )
        )
        return
    info = payload.get("info")
    if payload.get("type") != "token_count" or not isinstance(info, dict):
        state.sink.hold({"line": number, "record": record})
        return
    total = info.get("total_token_usage")
    last = info.get("last_token_usage")
    if total == state.total or not isinstance(last, dict):
        state.sink.hold({"line": number, "record": record})  # a repeat of the last count
        return
    state.total = total
    if state.usage is not None:
        state.close_run()
    body = ResponseReceived(usage=usage_of(last), model=state.model[:1024])
    state.usage = Entry(
        body, f"cx:{number}", time, state.sink.attach({"line": number, "raw": record}), where
    )
    if state.run is not None:  # the count follows its response here: place it now
        state.close_run()


# -- export ---------------------------------------------------------------------------------
def export(view: ExportSession) -> bytes:
    """The session as a rollout file."""
    return write_lines(positioned(view.events, _own))


def _own(group: list[Event]) -> list[tuple[object, Obj]]:
    event = group[0]
    meta = event.meta
    body = event.body
    raw = meta.get("raw")
    if "records" in meta and isinstance(body, AssistantMessageAdded):
        parts = list(body.parts)
        return [
            (
                r.get("line"),
                {**r["raw"], "payload": ItemMapper.fill_model(r["raw"]["payload"], parts)},
            )
            for r in meta["records"]
        ]
    if isinstance(raw, dict):
        record = copy.deepcopy(raw)
        payload: Obj = record["payload"]
        if isinstance(body, CompactionCommitted) or meta.get("compaction_not_covering"):
            payload["message"] = (
                body.summary if isinstance(body, CompactionCommitted) else getattr(body, "text", "")
            )
        elif isinstance(body, SystemSectionSet):
            base = payload.get("base_instructions")
            payload["base_instructions"] = (
                {**base, "text": body.text} if isinstance(base, dict) else body.text
            )
        elif not isinstance(body, ResponseReceived):
            record["payload"] = ItemMapper.fill_input(payload, [e.body for e in group])
        return [(meta.get("line"), record)]
    out: list[tuple[object, Obj]] = []
    for member in group:
        stamp = format_time(member.time)
        native = member.body
        if isinstance(native, CompactionCommitted):
            out.append(
                (
                    None,
                    {
                        "timestamp": stamp,
                        "type": "compacted",
                        "payload": {"message": native.summary},
                    },
                )
            )
        elif isinstance(native, ResponseReceived):
            u = native.usage
            last = {
                "input_tokens": u.input_tokens,
                "cached_input_tokens": u.cache_read_tokens,
                "output_tokens": u.output_tokens,
                "reasoning_output_tokens": u.reasoning_tokens,
            }
            out.append(
                (
                    None,
                    {
                        "timestamp": stamp,
                        "type": "event_msg",
                        "payload": {
                            "type": "token_count",
                            "info": {"last_token_usage": last, "total_token_usage": last},
                        },
                    },
                )
            )
        else:
            out.extend(
                (None, {"timestamp": stamp, "type": "response_item", "payload": item})
                for item in ItemMapper.items_of(native)
            )
    return out


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export)
