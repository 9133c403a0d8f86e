"""mini-swe-agent trajectories (``<instance>.traj.json``).

Theory of operation
-------------------
A trajectory is ``{info, messages, trajectory_format, instance_id}`` where
``messages`` is a plain chat message list (mapped by `openai_chat`): the
system prompt, the task, then assistant replies (a THOUGHT and one fenced bash
command in the text; there are no structured tool calls) alternating with the
environment's replies as user messages (``<returncode>`` and ``<output>``).
The observations stay user messages, because that is what the model saw; the
return code each reports is kept in ``meta["exit_code"]``.

Each assistant message's ``extra.response`` holds the raw provider response;
it stays in the message's meta (it never reaches a prompt) and yields a
derived ``ResponseReceived`` (usage, finish reason, model, response id). The
message's ``AssistantMessageAdded`` carries the model and response id too. The
other top-level fields (``info`` with the submission and model stats) are
kept in the first event's ``meta["doc"]``.
"""

from __future__ import annotations

import re

import msgspec
from turnlog.events import AssistantMessageAdded, Body, ResponseReceived, UserMessageAdded

from ._openai_chat import Messages, export_messages, parse_messages
from ._openai_responses import usage_of
from ._plan import (
    BadRecord,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    get_list,
    kind_of,
    load_document,
    natural_id,
    session_slug,
)

__all__ = ["FORMAT", "NAME", "export", "parse"]

NAME = "mini_swe_agent"
_RETURNCODE = re.compile(r"^<returncode>(-?\d{1,9})</returncode>")


def _response(msg: Obj) -> Obj:
    extra = msg.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    return response if isinstance(response, dict) else {}


def _amend(msg: Obj, body: Body) -> Body:
    response = _response(msg)
    if isinstance(body, AssistantMessageAdded) and response:
        return msgspec.structs.replace(
            body,
            model=str(response.get("model") or "")[:1024],
            response_id=str(response.get("id") or "")[:256],
        )
    return body


def _extra(msg: Obj) -> list[tuple[Body, str]]:
    response = _response(msg)
    if msg.get("role") != "assistant" or not response:
        return []
    choices = response.get("choices")
    first = (
        choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    )
    body = ResponseReceived(
        usage=usage_of(response.get("usage")),
        stop_reason=str(first.get("finish_reason") or "")[:1024],
        model=str(response.get("model") or "")[:1024],
        response_id=str(response.get("id") or "")[:256],
    )
    return [(body, "usage")]


def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map one trajectory to a plan.

    Raises:
        BadRecord: a malformed message (unless ``skip_bad``).
    """
    doc = load_document(data)
    if not isinstance(doc, dict):
        raise BadRecord("document", "", f"expected an object, found {kind_of(doc)}")
    messages = get_list(doc, "messages", "document", "messages")
    instance = doc.get("instance_id")
    natural = natural_id(source, data)
    if isinstance(instance, str) and instance:
        natural = f"{session_slug(instance)}-{natural.rsplit('-', 1)[-1]}"
    plan = Plan(natural=natural)
    parsed = Parsed(format=NAME, plans=[plan])
    entries: list[Entry] = []
    parse_messages(
        messages,
        Messages("ms", "messages", extra=_extra, amend=_amend),
        source,
        skip_bad,
        parsed,
        entries,
    )
    for entry in entries:
        body = entry.body
        if isinstance(body, UserMessageAdded):
            found = _RETURNCODE.match(body.text)
            if found:
                entry.meta["exit_code"] = int(found.group(1))
    if entries:
        entries[0].meta = {
            "doc": {k: v for k, v in doc.items() if k != "messages"},
            **entries[0].meta,
        }
    plan.entries = list(entries)
    return parsed


def export(view: ExportSession) -> bytes:
    """The session as a trajectory."""
    messages = export_messages(view.events)
    residual = view.events[0].meta.get("doc") if view.events else None
    doc: Obj = (
        dict(residual)
        if isinstance(residual, dict)
        else {"info": {}, "trajectory_format": "mini-swe-agent-1"}
    )
    doc["messages"] = messages
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export)
