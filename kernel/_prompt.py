"""The provider-neutral prompt that packing produces and adapters render.

Theory of operation
-------------------
A `Prompt` is system sections in order, the tool schemas, then messages with
roles ``user``, ``assistant`` and ``tool``. Its canonical bytes (deterministic
msgpack) are what a request record hashes; provider renderings are pure
functions of it, so replaying the neutral prompt covers them too.

Structural rules every packed prompt satisfies (checked by `check_prompt`):

* every tool message answers a tool call of the nearest preceding assistant
  message, and sits in the run of tool messages right after it;
* every tool call is answered by exactly one tool message in that run (a call
  without a recorded result is answered by a placeholder that says so);
* no call id repeats; no message is empty.
"""

from __future__ import annotations

from typing import Literal

import blake3
import msgspec
import xxhash

from ._events import ImagePart, NativePart, Part, ReasoningPart, TextPart, ToolCall, ToolSpec

__all__ = ["Breakpoint", "Message", "Prompt", "Section"]

_ENCODER = msgspec.msgpack.Encoder(order="deterministic")


class Section(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True):
    """One named part of the system prompt."""

    name: str
    text: str


class Message(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True):
    """One message of the neutral prompt.

    Attributes:
        role: ``user``, ``assistant`` or ``tool``.
        parts: text, image, reasoning and tool-call parts.
        tool_call_id: for ``tool`` messages, the call answered.
        name: for ``tool`` messages, the tool's name.
        is_error: for ``tool`` messages, whether the tool failed.
        source: lineage positions of the events this message came from.
    """

    role: Literal["user", "assistant", "tool"]
    parts: tuple[Part, ...]
    tool_call_id: str = ""
    name: str = ""
    is_error: bool = False
    source: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        """The text parts joined (convenience for tests and display)."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of an assistant message."""
        return tuple(p for p in self.parts if isinstance(p, ToolCall))


class Breakpoint(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A prompt-cache breakpoint: the prefix up to and including ``at`` is stable.

    Attributes:
        at: ``"tools"``, ``"system"`` (end of the static system sections),
            ``"summary"`` (end of the memory/summary sections) or
            ``"message"``.
        index: the message index when ``at == "message"``, else -1.
        reason: why it is there (``"older history"``, ``"latest"``...).
    """

    at: Literal["tools", "system", "summary", "message"]
    index: int = -1
    reason: str = ""


class Prompt(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A packed prompt, independent of any provider."""

    system: tuple[Section, ...]
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    breakpoints: tuple[Breakpoint, ...] = ()

    def encode(self) -> bytes:
        """Canonical bytes (what a request record hashes)."""
        return _ENCODER.encode(self)

    @property
    def hash(self) -> str:
        """blake3 hex digest of `encode`."""
        return blake3.blake3(self.encode()).hexdigest()

    def part_digests(self) -> bytes:
        """8-byte digests of each system section, the tools, and each message."""
        parts = [*self.system, self.tools, *self.messages]
        return b"".join(xxhash.xxh3_64_digest(_ENCODER.encode(p)) for p in parts)

    def describe_part(self, index: int) -> str:
        """Name the part at ``index`` of `part_digests` order."""
        if index < len(self.system):
            return f"system section {index} ({self.system[index].name!r})"
        if index == len(self.system):
            return "tool schemas"
        i = index - len(self.system) - 1
        if i < len(self.messages):
            message = self.messages[i]
            return f"message {i} (role {message.role}, from positions {list(message.source)})"
        return f"part {index} (beyond the end of this prompt)"

    def problems(self) -> list[str]:
        """Structural problems of the prompt (empty when it is well formed): an empty
        message, a result that answers no call of the preceding assistant message, a
        call left unanswered, a repeated call id, assistant-only parts elsewhere."""
        return check_prompt(self)

    def first_difference(self, other: Prompt) -> str | None:
        """Where ``other`` first differs from this prompt (None when equal)."""
        if self.system != other.system:
            for i, (sa, sb) in enumerate(zip(self.system, other.system, strict=False)):
                if sa != sb:
                    return f"system section {i} ({sa.name!r})"
            return f"system sections ({len(self.system)} vs {len(other.system)})"
        if self.tools != other.tools:
            return "tool schemas"
        for i, (a, b) in enumerate(zip(self.messages, other.messages, strict=False)):
            if a != b:
                return f"message {i} (role {a.role}, from positions {list(a.source)})"
        if len(self.messages) != len(other.messages):
            return f"message count ({len(self.messages)} vs {len(other.messages)})"
        if self.breakpoints != other.breakpoints:
            return "cache breakpoints"
        return None


def check_prompt(prompt: Prompt) -> list[str]:
    """Structural problems of a prompt (empty when it is well formed)."""
    problems: list[str] = []
    seen_calls: set[str] = set()
    open_calls: dict[str, int] = {}
    last_assistant = -1
    for i, message in enumerate(prompt.messages):
        if not message.parts:
            problems.append(f"message {i} ({message.role}) is empty")
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                problems.append(
                    f"message {i}: tool result for {message.tool_call_id!r} does "
                    "not answer a call of the preceding assistant message"
                )
            else:
                del open_calls[message.tool_call_id]
            continue
        if open_calls:
            problems.append(
                f"message {i}: calls {sorted(open_calls)} of message "
                f"{last_assistant} are not answered before it"
            )
        open_calls = {}
        if message.role == "assistant":
            last_assistant = i
            for part in message.parts:
                if isinstance(part, ToolCall):
                    if part.id in seen_calls:
                        problems.append(f"message {i}: call id {part.id!r} repeats")
                    seen_calls.add(part.id)
                    open_calls[part.id] = i
        elif any(isinstance(p, (ToolCall, ReasoningPart, NativePart)) for p in message.parts):
            problems.append(f"message {i}: a {message.role} message holds assistant-only parts")
        elif not all(isinstance(p, (TextPart, ImagePart)) for p in message.parts):
            problems.append(f"message {i}: unexpected part type")
    if open_calls:
        problems.append(
            f"calls {sorted(open_calls)} of message {last_assistant} are not "
            "answered at the end of the prompt"
        )
    return problems
