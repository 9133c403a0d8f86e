"""The context tools' specs: tools a model can call to read what packing cut.

The kit is data: six `ToolSpec`s an orchestrator registers with its own tools
(``turnlog.adapters.Session.context_tools`` returns them and executes their
calls). Packing reads one recorded fact from it: when the ``ToolsSet`` in force
where a tool output was appended holds `READ_OUTPUT` exactly as written here,
that output's truncation and clip notices name the ``read_output`` tool and the
reference to pass it; otherwise they name the ``turnlog blob`` and ``turnlog
show`` commands, as they always have, so records made before the kit existed
(or without it) replay byte for byte.
"""

from __future__ import annotations

import json

from ._events import ToolSpec

__all__ = ["CONTEXT_TOOLS", "READ_OUTPUT"]


def _spec(
    name: str, description: str, properties: dict[str, object], required: tuple[str, ...]
) -> ToolSpec:
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }
    return ToolSpec(
        name=name,
        description=description,
        parameters=json.dumps(schema, sort_keys=True, separators=(",", ":")),
    )


_INT = {"type": "integer", "minimum": 0}

READ_OUTPUT = _spec(
    "read_output",
    "Read part of a tool output that the conversation shows truncated, clipped or as a "
    "preview. Pass the ref its notice names, then either offset and length (characters), "
    "or start_line and line_count (1-based lines), or grep (lines containing the text).",
    {
        "ref": {"type": "string", "description": "the blob hash or SESSION#SEQ in the notice"},
        "offset": _INT,
        "length": _INT,
        "start_line": _INT,
        "line_count": _INT,
        "grep": {"type": "string"},
    },
    ("ref",),
)

SEARCH_HISTORY = _spec(
    "search_history",
    "Search the full text of this conversation's earlier messages and tool outputs "
    "(including what was truncated or summarized away). Returns the best passages with "
    "the ref of each.",
    {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1, "maximum": 20}},
    ("query",),
)

EXPAND_SUMMARY = _spec(
    "expand_summary",
    "Show the events a summary of earlier conversation replaced. Pass the summary's id "
    "(the number after # in its heading).",
    {"id": {"type": "integer", "minimum": 0}},
    ("id",),
)

MEMORY_SAVE = _spec(
    "memory_save",
    "Save a fact worth keeping across sessions: a project fact, a user preference or a "
    "decision. Returns its id.",
    {
        "title": {"type": "string"},
        "content": {"type": "string"},
        "type": {"type": "string", "enum": ["project", "user", "decision"]},
        "retention": {"type": "string", "enum": ["priority", "durable", "working"]},
    },
    ("title", "content"),
)

MEMORY_SEARCH = _spec(
    "memory_search",
    "Search saved memories by words in their title or content.",
    {"query": {"type": "string"}},
    ("query",),
)

MEMORY_FORGET = _spec(
    "memory_forget",
    "Forget a saved memory by its id (it stops reaching the prompt; history keeps it).",
    {"id": {"type": "string"}, "reason": {"type": "string"}},
    ("id",),
)

#: The whole kit, in the order `Session.context_tools` returns it.
CONTEXT_TOOLS: tuple[ToolSpec, ...] = (
    READ_OUTPUT,
    SEARCH_HISTORY,
    EXPAND_SUMMARY,
    MEMORY_SAVE,
    MEMORY_SEARCH,
    MEMORY_FORGET,
)
