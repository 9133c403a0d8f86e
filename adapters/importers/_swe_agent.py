"""SWE-agent trajectories (``.traj``).

Theory of operation
-------------------
A trajectory holds ``history``, the chat the model saw (system, user,
assistant and, in function-calling configurations, ``tool`` messages answering
OpenAI-style ``tool_calls`` through ``tool_call_ids``), and ``trajectory``, the
agent's steps (action, observation, response, thought, state), which repeat
the history in another shape. The history is the source of truth and is
mapped by `openai_chat`; the fields SWE-agent adds to messages (``thought``,
``action``, ``agent``, ``message_type``, ``is_demo``) stay in each message's
meta. Without function calling the command is in the assistant text and the
observation comes back as a user message, which stays a user message. The
other top-level fields (``trajectory``, ``info``, ``environment``,
``replay_config``) are kept in the first event's ``meta["doc"]``. The format
has no timestamps.
"""

from __future__ import annotations

import msgspec

from ._openai_chat import Messages, export_messages, parse_messages
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
)

__all__ = ["FORMAT", "NAME", "export", "parse"]

NAME = "swe_agent"


def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map one trajectory to a plan.

    Raises:
        BadRecord: a malformed message (unless ``skip_bad``).
    """
    doc = load_document(data)
    if not isinstance(doc, dict):
        raise BadRecord("document", "", f"expected an object, found {kind_of(doc)}")
    history = get_list(doc, "history", "document", "history")
    plan = Plan(natural=natural_id(source, data))
    parsed = Parsed(format=NAME, plans=[plan])
    entries: list[Entry] = []
    parse_messages(history, Messages("sw", "history"), source, skip_bad, parsed, entries)
    if entries:
        entries[0].meta = {
            "doc": {k: v for k, v in doc.items() if k != "history"},
            **entries[0].meta,
        }
    plan.entries = list(entries)
    return parsed


def export(view: ExportSession) -> bytes:
    """The session as a trajectory."""
    history = export_messages(view.events)
    residual = view.events[0].meta.get("doc") if view.events else None
    doc: Obj = {"environment": "turnlog", "trajectory": [], "history": history, "info": {}}
    if isinstance(residual, dict):
        doc = {**residual, "history": history}
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export)
