"""OpenHands event streams (a JSON list of events) and resolver/evaluation
``output.jsonl`` files (one task per line, its events under ``history``).

Theory of operation
-------------------
An event is an action (``action`` + ``args``) or an observation
(``observation`` + ``content`` + ``extras``) with ``id``, ``timestamp`` and
``source``; an observation names the action it answers in ``cause``. Older
outputs use a flat shape (the args or extras inline, no ``id``/``source``),
where an observation answers the action just before it, and some hold
``[action, observation]`` pairs; both are read.

* ``message`` actions become ``UserMessageAdded`` (source user, or the first
  message of a flat history) or ``AssistantMessageAdded`` text;
* a ``system`` action sets the ``system`` section (and its tools a ``ToolsSet``);
* other agent actions are tool calls: with ``tool_call_metadata`` the call id,
  function name and arguments of the LLM's tool call (actions of one LLM
  response, same ``model_response.id``, merge into one assistant message, with
  the ``thought`` as text and the response's usage as a derived
  ``ResponseReceived``); without it a call named after the action, with id
  ``oh:<event id>`` and the args as arguments;
* observations answering a call become ``ToolResultAdded`` (``exit_code`` from
  the command metadata, ``is_error`` for ``error`` observations); other
  observations with content become ``NotificationAdded`` (``openhands/<kind>``);
  state changes and empty ones stay in meta.

The LLM response embedded in ``tool_call_metadata`` stays in the event's
meta; it never reaches a prompt. Message and observation texts move into the
payloads; everything else of an event stays in its meta residual.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Event,
    NotificationAdded,
    Part,
    ResponseReceived,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

from ._openai_responses import tools_set, usage_of
from ._plan import (
    JSON_ERRORS,
    BadRecord,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    RecordSink,
    SkippedRecord,
    decode_or_text,
    dumps_sorted,
    format_time,
    get_dict,
    get_list,
    get_str,
    kind_of,
    load_document,
    natural_id,
    parse_time,
    positioned,
    session_slug,
    without,
)

__all__ = [
    "EVENTS_FORMAT",
    "NAME",
    "OUTPUT",
    "OUTPUT_FORMAT",
    "export_events",
    "export_output",
    "parse_events",
    "parse_output",
]

NAME = "openhands"
OUTPUT = "openhands_output"

_QUIET = frozenset({"agent_state_changed", "change_agent_state", "null", "recall_query"})


class _Stream:
    """Maps the events of one history."""

    def __init__(self, fmt: str, source: str, skip_bad: bool, parsed: Parsed) -> None:
        self.fmt = fmt
        self.source = source
        self.skip_bad = skip_bad
        self.parsed = parsed
        self.entries: list[Entry] = []
        self.sink = RecordSink(fmt)
        self.calls: dict[str, tuple[str, str]] = {}  # event id -> (call id, tool name)
        self.responses: dict[str, int] = {}  # model response id -> assistant entry index
        self.last_action = ""  # flat shape: the call the next observation answers
        self.messages = 0

    def run(self, history: list[Any], path: str) -> list[Entry]:
        for index, event in enumerate(history):
            where = f"{path}[{index}]"
            try:
                if not isinstance(event, dict):
                    raise BadRecord(where, "", f"expected an event object, found {kind_of(event)}")
                self._event(event, index, where)
            except BadRecord as exc:
                if not self.skip_bad:
                    raise
                self.parsed.skipped.append(
                    SkippedRecord(self.source, exc.where, exc.field, exc.reason)
                )
                self.sink.hold({"index": index, "record": event})
        self.sink.finish(self.entries, key="oh:records", time=None, where=path)
        return self.entries

    def _event(self, event: Obj, index: int, where: str) -> None:
        time = parse_time(event.get("timestamp"), where, "timestamp")
        ident = event.get("id")
        name = str(ident) if isinstance(ident, int) and not isinstance(ident, bool) else f"i{index}"
        if "action" in event:
            self._action(event, index, where, time, name)
        elif "observation" in event:
            self._observation(event, index, where, time, name)
        else:
            self.sink.hold({"index": index, "record": event})

    def _emit(self, body: Body, key: str, time: int | None, meta: Obj, where: str) -> None:
        self.entries.append(Entry(body, key, time, self.sink.attach(meta), where))

    # -- actions -------------------------------------------------------------------------------
    def _action(self, event: Obj, index: int, where: str, time: int | None, name: str) -> None:
        action = get_str(event, "action", where, "action")
        flat = "args" not in event
        args = event if flat else get_dict(event, "args", where, "args")
        key = f"oh:{name}"
        if action == "message":
            self._message(event, args, flat, index, where, time, key)
            return
        if action == "system":
            self._system(event, args, index, where, time, key)
            return
        if action in _QUIET or event.get("source") in ("user", "environment"):
            self.sink.hold({"index": index, "record": event})
            return
        metadata = event.get("tool_call_metadata")
        thought = args.get("thought") if isinstance(args.get("thought"), str) else ""
        if isinstance(metadata, dict) and isinstance(metadata.get("tool_call_id"), str):
            call_id = metadata["tool_call_id"]
            tool = str(metadata.get("function_name") or action)
            response = metadata.get("model_response")
            response = response if isinstance(response, dict) else {}
            arguments = _arguments(response, call_id) or dumps_sorted(
                {k: v for k, v in args.items() if k != "thought"}
            )
        else:
            call_id = f"oh:{name}"
            tool = action
            response = {}
            arguments = dumps_sorted(
                {k: v for k, v in args.items() if k not in ("action", "thought")}
            )
        call = ToolCall(id=call_id[:256], name=tool[:1024], arguments=arguments)
        self.calls[name] = (call.id, call.name)
        self.last_action = name
        parts: list[Part] = [TextPart(text=thought)] if thought else []
        parts.append(call)
        rid = response.get("id")
        record = {"index": index, "raw": event}
        if isinstance(rid, str) and rid in self.responses:
            entry = self.entries[self.responses[rid]]
            body = entry.body
            assert isinstance(body, AssistantMessageAdded)
            entry.body = msgspec.structs.replace(body, parts=body.parts + tuple(parts))
            entry.meta["records"].append(record)
            return
        model = str(response.get("model") or "")[:1024]
        self._emit(
            AssistantMessageAdded(
                parts=tuple(parts), model=model, response_id=str(rid or "")[:256]
            ),
            key,
            time,
            {"records": [record]},
            where,
        )
        if isinstance(rid, str) and rid:
            self.responses[rid] = len(self.entries) - 1
            if isinstance(response.get("usage"), dict):
                self.entries.append(
                    Entry(
                        ResponseReceived(
                            usage=usage_of(response["usage"]), model=model, response_id=rid[:256]
                        ),
                        f"{key}:usage",
                        time,
                        {"derived": True},
                        where,
                    )
                )

    def _message(
        self, event: Obj, args: Obj, flat: bool, index: int, where: str, time: int | None, key: str
    ) -> None:
        content = get_str(
            args, "content", where, "content" if flat else "args.content", optional=True
        )
        source = event.get("source")
        self.messages += 1
        user = source == "user" or (source is None and self.messages == 1)
        body: Body = (
            UserMessageAdded(text=content)
            if user
            else AssistantMessageAdded(parts=(TextPart(text=content),))
        )
        raw = copy.deepcopy(event)
        (raw if flat else raw["args"]).pop("content", None)
        self._emit(body, key, time, {"index": index, "raw": raw}, where)

    def _system(
        self, event: Obj, args: Obj, index: int, where: str, time: int | None, key: str
    ) -> None:
        content = get_str(args, "content", where, "args.content", optional=True)
        raw = copy.deepcopy(event)
        raw.get("args", raw).pop("content", None)  # flat records carry no "args"
        self._emit(
            SystemSectionSet(name="system", text=content),
            key,
            time,
            {"index": index, "raw": raw},
            where,
        )
        tools = tools_set(args.get("tools") or [])
        if tools is not None:
            self.entries.append(Entry(tools, f"{key}:tools", time, {"derived": True}, where))

    # -- observations --------------------------------------------------------------------------
    def _observation(self, event: Obj, index: int, where: str, time: int | None, name: str) -> None:
        kind = get_str(event, "observation", where, "observation")
        flat = "extras" not in event and "cause" not in event
        content = event.get("content")
        if content is not None and not isinstance(content, str):
            raise BadRecord(where, "content", f"expected a string, found {kind_of(content)}")
        cause = event.get("cause")
        answered = self.calls.get(str(cause)) if isinstance(cause, int) else None
        if answered is None and flat and self.last_action:
            answered = self.calls.get(self.last_action)
        metadata = event.get("tool_call_metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("tool_call_id"), str):
            answered = (
                metadata["tool_call_id"][:256],
                str(metadata.get("function_name") or kind)[:1024],
            )
        raw = without(event, "content")
        key = f"oh:{name}"
        if answered is not None:
            self.last_action = ""
            body: Body = ToolResultAdded(
                call_id=answered[0],
                tool_name=answered[1],
                output=content or "",
                is_error=kind == "error",
                exit_code=_exit_code(event),
            )
            self._emit(body, key, time, {"index": index, "raw": raw}, where)
        elif kind in _QUIET or not content:
            self.sink.hold({"index": index, "record": event})
        else:
            self._emit(
                NotificationAdded(source=f"openhands/{kind}"[:1024], text=content),
                key,
                time,
                {"index": index, "raw": raw},
                where,
            )


def _arguments(response: Obj, call_id: str) -> str:
    for choice in response.get("choices") or ():
        message: Any = choice.get("message") if isinstance(choice, dict) else None
        for call in (message if isinstance(message, dict) else {}).get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if (
                call.get("id") == call_id
                and isinstance(function, dict)
                and isinstance(function.get("arguments"), str)
            ):
                return str(function["arguments"])
    return ""


def _exit_code(event: Obj) -> int | None:
    extras: Obj = event["extras"] if isinstance(event.get("extras"), dict) else event
    code = extras.get("exit_code")
    meta = extras.get("metadata")
    if code is None and isinstance(meta, dict):
        code = meta.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and abs(code) < 2**62:
        return code
    return None


def _flatten(history: list[Any]) -> tuple[list[Any], bool]:
    """A history of ``[action, observation]`` pairs as a flat list (and whether it was)."""
    if history and all(isinstance(h, list) for h in history):
        return [e for pair in history for e in pair], True
    return history, False


def parse_events(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map an event stream (a JSON list of events) to one plan.

    Raises:
        BadRecord: a malformed event (unless ``skip_bad``).
    """
    doc = load_document(data)
    if not isinstance(doc, list):
        raise BadRecord("document", "", f"expected an array of events, found {kind_of(doc)}")
    plan = Plan(natural=natural_id(source, data))
    parsed = Parsed(format=NAME, plans=[plan])
    plan.entries = list(_Stream(NAME, source, skip_bad, parsed).run(doc, "events"))
    return parsed


def parse_output(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map an ``output.jsonl`` file to one plan per task line.

    Raises:
        BadRecord: a malformed line or event (unless ``skip_bad``).
    """
    base = natural_id(source, data)
    parsed = Parsed(format=OUTPUT, plans=[])
    seen: set[str] = set()
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            try:
                task = msgspec.json.decode(raw)
            except JSON_ERRORS as exc:
                raise BadRecord(where, "", f"not valid JSON ({exc})") from None
            if not isinstance(task, dict):
                raise BadRecord(where, "", f"expected a JSON object, found {kind_of(task)}")
            history, pairs = _flatten(get_list(task, "history", where, "history"))
        except BadRecord as exc:
            if not skip_bad:
                raise
            parsed.skipped.append(SkippedRecord(source, exc.where, exc.field, exc.reason))
            continue
        name = _task_name(task, number)
        while name in seen:
            name += "+"
        seen.add(name)
        plan = Plan(natural=f"{base}/{name}", suffix=name)
        stream = _Stream(OUTPUT, source, skip_bad, parsed)
        entries = stream.run(history, f"line {number}: history")
        doc = without(task, "history")
        if pairs:
            doc["$pairs"] = True
        if entries:
            entries[0].meta = {"doc": doc, **entries[0].meta}
        plan.entries = list(entries)
        parsed.plans.append(plan)
    return parsed


def _task_name(task: Obj, number: int) -> str:
    instance = task.get("instance_id")
    if isinstance(instance, str) and instance:
        return session_slug(instance)
    issue = task.get("issue")
    if isinstance(issue, dict) and isinstance(issue.get("number"), int):
        return session_slug(f"{issue.get('owner', '')}-{issue.get('repo', '')}-{issue['number']}")
    return f"task-{number}"


# -- export ---------------------------------------------------------------------------------
def _own(group: list[Event]) -> list[tuple[object, Obj]]:
    event = group[0]
    meta = event.meta
    body = event.body
    if "records" in meta:
        return [(r.get("index"), r["raw"]) for r in meta["records"]]
    raw = meta.get("raw")
    if isinstance(raw, dict):
        record = copy.deepcopy(raw)
        text = _text(body)
        if "action" in record:
            record.get("args", record)["content"] = text
        else:
            record["content"] = text
        return [(meta.get("index"), record)]
    return [(None, record) for record in _native(event)]


def _text(body: Body) -> str:
    if isinstance(body, (UserMessageAdded, NotificationAdded, SystemSectionSet)):
        return body.text
    if isinstance(body, ToolResultAdded):
        return body.output
    if isinstance(body, AssistantMessageAdded):
        return "".join(p.text for p in body.parts if isinstance(p, TextPart))
    return ""


def _native(event: Event) -> list[Obj]:
    body = event.body
    stamp = {"timestamp": _stamp(event.time)} if event.time is not None else {}
    if isinstance(body, UserMessageAdded):
        return [{"source": "user", **stamp, "action": "message", "args": {"content": body.text}}]
    if isinstance(body, AssistantMessageAdded):
        out: list[Obj] = []
        text = _text(body)
        calls = [p for p in body.parts if isinstance(p, ToolCall)]
        if not calls:
            return [{"source": "agent", **stamp, "action": "message", "args": {"content": text}}]
        for n, call in enumerate(calls):
            args = decode_or_text(call.arguments)
            args = args if isinstance(args, dict) else {"arguments": args}
            out.append(
                {
                    "source": "agent",
                    **stamp,
                    "action": call.name,
                    "args": {**args, "thought": text if n == 0 else ""},
                    "tool_call_metadata": {"function_name": call.name, "tool_call_id": call.id},
                }
            )
        return out
    if isinstance(body, ToolResultAdded):
        return [
            {
                "source": "environment",
                **stamp,
                "observation": body.tool_name or "run",
                "content": body.output,
                "extras": {},
                "tool_call_metadata": {
                    "function_name": body.tool_name,
                    "tool_call_id": body.call_id,
                },
            }
        ]
    if isinstance(body, NotificationAdded):
        return [
            {
                "source": "environment",
                **stamp,
                "observation": "notification",
                "content": body.text,
                "extras": {},
            }
        ]
    if isinstance(body, SystemSectionSet) and body.text:
        return [{"source": "agent", **stamp, "action": "system", "args": {"content": body.text}}]
    return []


def _stamp(micros: int | None) -> str:
    return format_time(micros, naive=True, places=6)


def _history(view: ExportSession) -> list[Obj]:
    records = [record for _, _, record in positioned(view.events, _own, at="index")]
    for n, record in enumerate(records):
        if "id" not in record and ("source" in record):
            record["id"] = n
    return records


def export_events(view: ExportSession) -> bytes:
    """The session as an event stream."""
    return msgspec.json.format(msgspec.json.encode(_history(view)), indent=2) + b"\n"


def export_output(view: ExportSession) -> bytes:
    """The session as one ``output.jsonl`` line."""
    history: list[Any] = _history(view)
    residual = view.events[0].meta.get("doc") if view.events else None
    doc: Obj = dict(residual) if isinstance(residual, dict) else {"instruction": ""}
    if doc.pop("$pairs", False):
        history = [history[i : i + 2] for i in range(0, len(history), 2)]
    doc["history"] = history
    return msgspec.json.encode(doc) + b"\n"


#: This module's transcript formats (an event stream and an output file), as the registry
#: (`_transcripts._REGISTRY`) lists them.
EVENTS_FORMAT = Format(NAME, parse_events, export_events)
OUTPUT_FORMAT = Format(OUTPUT, parse_output, export_output)
