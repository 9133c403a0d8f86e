"""Render a neutral `Prompt` to a provider request body.

Theory of operation
-------------------
A renderer is a pure function of its arguments: the prompt, the model name,
the output cap, the blob reader (content-addressed, so a blob's bytes are
fixed by its hash) and any extra top-level fields. It reads no clock, no
environment and no randomness, and the canonical bytes (`canonical`: JSON with
sorted keys, no spaces, UTF-8) of the same arguments are always the same. That
is what lets `Replayer.record` hash the rendered body into the request record
and `Replayer.replay` re-render and compare.

The formats (one `Provider` record each, in ``PROVIDERS``):

* ``openai-chat``: Chat Completions. One system message (the sections joined
  by a blank line), user/assistant/tool messages as they come; assistant
  tool calls carry ``function.arguments`` as JSON text; reasoning is not sent
  (the API takes none back).
* ``openai-responses``: Responses. The sections become ``instructions``; an
  assistant message becomes, in part order, ``reasoning`` items (only those
  this API produced: provider ``openai`` with an item id; ``encrypted_content``
  from ``opaque``), assistant ``message`` items and ``function_call`` items;
  a tool message becomes a ``function_call_output``.
* ``anthropic``: Messages. ``system`` is one text block per section, so a
  cache breakpoint can sit between the static sections and the summary; tool
  results become ``tool_result`` blocks at the front of the next user turn;
  turns strictly alternate (consecutive messages of one role are merged, and
  a user turn is put first when the prompt starts with the assistant);
  thinking blocks keep their signature (``opaque``) and are sent only for
  reasoning this API produced; breakpoints become ``cache_control`` (at most
  four).

Rules shared by all formats, so every body is valid on the wire:

* when the prompt ends in the results of the last assistant message's calls
  and some are missing (calls still running), each missing one is answered
  with `MISSING_RESULT_TEXT` as an error, as the packer does for older calls
  (every API refuses a call without its result once a result follows it); a
  prompt that ends in the assistant message itself is rendered as it is;
* text that is empty (or, for Anthropic, only whitespace) becomes
  `EMPTY_TEXT`; a message with nothing to send carries that text;
* tool schemas are JSON objects with ``"type": "object"`` (added when absent);
* tool-call arguments that are not a JSON object go to Anthropic as
  ``{"_raw_arguments": TEXT}`` (its ``input`` must be an object);
* call ids that a provider would refuse (Anthropic: ``[A-Za-z0-9_-]+``;
  Chat Completions: at most 40 characters) are replaced, consistently in the
  call and its result, by a prefix plus a blake3 digest of the id;
* images go as URLs, or as base64 data read with ``blobs``; an image the
  format cannot carry (in an assistant or tool message, an unsupported media
  type) becomes a text note;
* a provider's own item (a `NativePart`: a Responses ``compaction`` item, an
  Anthropic ``compaction`` block) goes back unchanged, parsed from the JSON
  text it was kept as, to the format that produced it; any other format
  refuses the prompt with `RenderError` naming the item's type (a summary
  only that provider can read is never sent as a placeholder);
* from render version 2, a prompt with tool calls but no tool definitions
  (a session imported from a transcript) gets definitions derived from its
  calls (`derived_tools`) for a format whose API refuses calls without them
  (``Provider.tools_required``: Anthropic).

A request record names its render version in ``render_args`` (`render_args`
writes it, `renderer_for` reads it; a record without one is version 1), so an
old record re-renders to its old bytes.

The prompt must satisfy `Prompt.problems` (every packed prompt
does); a prompt that does not is refused with `RenderError` rather than sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from turnlog.events import NativePart, RequestIssued, TextPart
from turnlog.packing import Message, Prompt
from turnlog.validation import check_integer, check_text, invalid

from ._registry import provider
from ._wire import (
    MISSING_RESULT_TEXT,
    RENDER_LATEST,
    BlobReader,
    Provider,
    RenderError,
    RenderOptions,
    canonical,
    derived_tools,
)

__all__ = ["derived_tool_names", "render", "render_args", "render_body", "renderer", "renderer_for"]


def render_body(
    prompt: Prompt,
    format: str,  # noqa: A002
    *,
    model: str,
    max_tokens: int | None,
    blobs: BlobReader | None = None,
    extra: Mapping[str, object] | None = None,
    version: int = RENDER_LATEST,
) -> dict[str, object]:
    """Render ``prompt`` as the request body of ``format`` (a dict of JSON values).

    Parameters:
        prompt: a packed prompt.
        format: a provider name, a key of ``PROVIDERS`` (``openai-chat``,
            ``openai-responses``, ``anthropic``).
        model: the model name put in the body.
        max_tokens: the output cap (``max_completion_tokens``, ``max_output_tokens``
            or ``max_tokens``); required for Anthropic, omitted elsewhere when None.
        blobs: reads the bytes of images stored as blobs (``Log.blob``).
        extra: further top-level fields (``stream``, ``temperature``, ``thinking``,
            ``include``...); they may not replace a rendered field.
        version: the render version (1 to `RENDER_LATEST`; see the module docstring);
            a recorded request names its own, which `renderer_for` reads.

    Raises:
        RenderError: unknown format, bad arguments, a malformed prompt, a tool schema
            that is not a JSON object, a blob image without ``blobs``.
    """
    spec = provider(format)
    _check_version(version)
    check_text(model, "model", error=RenderError)
    check_integer(max_tokens, "max_tokens", min_value=1, optional=True, error=RenderError)
    if max_tokens is None and spec.max_tokens_required:
        raise RenderError(f"the {format} format needs max_tokens (the API requires it)")
    problems = prompt.problems()
    if problems:
        raise RenderError(
            f"the prompt is malformed ({len(problems)} "
            f"{'problem' if len(problems) == 1 else 'problems'}): "
            f"{'; '.join(problems[:3])}. Render only prompts that the packer made"
        )
    _check_native(prompt, format)
    prompt = _answer_pending(_with_tools(prompt, spec, version))
    body = spec.build(prompt, RenderOptions(model, max_tokens, blobs, version))
    for key, value in (extra or {}).items():
        if key in body:
            raise RenderError(
                f"extra field {key!r} would replace a rendered field; "
                "change the prompt or the arguments instead"
            )
        body[key] = value
    return body


def render(
    prompt: Prompt,
    format: str,  # noqa: A002
    *,
    model: str,
    max_tokens: int | None,
    blobs: BlobReader | None = None,
    extra: Mapping[str, object] | None = None,
    version: int = RENDER_LATEST,
) -> bytes:
    """Render ``prompt`` as the canonical bytes of a ``format`` request body.

    The same arguments always give the same bytes. See `render_body` for the
    parameters; use `renderer` to get the one-argument function that
    ``Replayer.record(..., render=...)`` and ``Replayer.replay`` take.

    Raises:
        RenderError: as `render_body`, or the body cannot be encoded.
    """
    return canonical(
        render_body(
            prompt,
            format,
            model=model,
            max_tokens=max_tokens,
            blobs=blobs,
            extra=extra,
            version=version,
        )
    )


def renderer_for(
    request: RequestIssued,
    *,
    blobs: BlobReader | None = None,
) -> Callable[[Prompt], bytes] | None:
    """The renderer a recorded request was rendered with (None for ``neutral``).

    Pass it to ``Replayer.replay(..., render=...)`` to check the rendered body too.

    Raises:
        RenderError: the record names a format this version does not know.
    """
    if request.format == "neutral" or not request.rendered_hash:
        return None
    try:
        args = json.loads(request.render_args) if request.render_args else {}
    except ValueError as exc:
        raise RenderError(f"the record's render_args are not JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise RenderError("the record's render_args must be a JSON object")
    max_tokens = args.get("max_tokens")
    extra = args.get("extra")
    check_integer(
        max_tokens, "render_args.max_tokens", min_value=1, optional=True, error=RenderError
    )
    if extra is not None and not isinstance(extra, dict):
        invalid("render_args.extra", "a JSON object", extra, with_type=True, error=RenderError)
    return renderer(
        request.format,
        model=request.model,
        max_tokens=max_tokens,
        blobs=blobs,
        extra=extra,
        version=_recorded_version(args),
    )


def _recorded_version(args: Mapping[str, object]) -> int:
    # A record without a version was rendered before versions existed: version 1.
    version = args.get("version", 1)
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not 1 <= version <= RENDER_LATEST
    ):
        raise RenderError(
            f"render_args.version must be an int from 1 to {RENDER_LATEST}, "
            f"found {version!r}; a newer turnlog recorded this request"
        )
    return version


def _check_version(version: int) -> None:
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not 1 <= version <= RENDER_LATEST
    ):
        raise RenderError(f"version must be an int from 1 to {RENDER_LATEST}, found {version!r}")


def render_args(
    *,
    max_tokens: int | None,
    extra: Mapping[str, object] | None = None,
    version: int = RENDER_LATEST,
) -> str:
    """The ``render_args`` to record with a request rendered with these arguments
    (`renderer_for` reads them back). Pass the ``version`` the renderer was made with
    (both default to `RENDER_LATEST`).

    Raises:
        RenderError: a version outside 1 to `RENDER_LATEST`.
    """
    _check_version(version)
    args: dict[str, object] = {"max_tokens": max_tokens}
    if extra:
        args["extra"] = dict(extra)
    if version > 1:
        args["version"] = version
    return canonical(args).decode()


def derived_tool_names(request: RequestIssued, prompt: Prompt) -> tuple[str, ...]:
    """The tools whose definitions the rendered body of ``request`` derives from the
    calls of its (re-packed) ``prompt`` because none were recorded (empty for a neutral
    record, a format that needs none, a record of render version 1 or a prompt that
    defines its tools). ``turnlog explain`` lists them.

    Raises:
        RenderError: the record names a format or render version this version does
            not know.
    """
    if request.format == "neutral" or not request.rendered_hash:
        return ()
    try:
        args = json.loads(request.render_args) if request.render_args else {}
    except ValueError as exc:
        raise RenderError(f"the record's render_args are not JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise RenderError("the record's render_args must be a JSON object")
    derived = _with_tools(prompt, provider(request.format), _recorded_version(args))
    return tuple(t.name for t in derived.tools) if derived is not prompt else ()


def renderer(
    format: str,  # noqa: A002
    *,
    model: str,
    max_tokens: int | None,
    blobs: BlobReader | None = None,
    extra: Mapping[str, object] | None = None,
    version: int = RENDER_LATEST,
) -> Callable[[Prompt], bytes]:
    """A pure ``Prompt -> bytes`` function for ``Replayer.record`` / ``Replayer.replay``.

    Example::

        render = renderer("anthropic", model="claude-sonnet-4-5", max_tokens=8192)
        recorded = replayer.record(session, format="anthropic", render=render)

    Record it with ``render_args=render_args(max_tokens=..., extra=..., version=...)``
    of the same arguments, so that `renderer_for` rebuilds it.

    Raises:
        RenderError: ``format`` or ``version`` is unknown, or the arguments are bad
            (an empty model, a ``max_tokens`` that is not a positive int or is
            missing where the API requires one, an ``extra`` that is not a mapping,
            replaces a field every body has or holds what JSON cannot carry):
            checked now, not at the first call.
    """
    provider(format)
    _check_version(version)
    if extra is not None and not isinstance(extra, Mapping):
        invalid(
            "extra", "None or a mapping of body fields", extra, with_type=True, error=RenderError
        )
    frozen = dict(extra or {})
    # What every call would refuse is refused now, before a caller records anything.
    render(
        Prompt(system=(), tools=(), messages=()),
        format,
        model=model,
        max_tokens=max_tokens,
        extra=frozen,
        version=version,
    )

    def render_prompt(prompt: Prompt) -> bytes:
        return render(
            prompt,
            format,
            model=model,
            max_tokens=max_tokens,
            blobs=blobs,
            extra=frozen,
            version=version,
        )

    return render_prompt


def _check_native(prompt: Prompt, format: str) -> None:  # noqa: A002
    """Refuse a provider's own item that ``format`` does not own."""
    for i, message in enumerate(prompt.messages):
        for part in message.parts:
            if isinstance(part, NativePart) and part.format != format:
                raise RenderError(
                    f"message {i} holds a {part.format} {part.item_type!r} item (from "
                    f"event position {message.source[0] if message.source else '?'}), "
                    f"which only the {part.format} format can carry, not {format}; render "
                    f"the session to {part.format}, or rewind it to before that message"
                )


def _with_tools(prompt: Prompt, spec: Provider, version: int) -> Prompt:
    """``prompt`` with `derived_tools` when its format needs definitions for its calls
    and the render version derives them (from 2); else ``prompt`` itself."""
    if version < 2 or not spec.tools_required or prompt.tools:
        return prompt
    tools = derived_tools(prompt)
    if not tools:
        return prompt
    return Prompt(
        system=prompt.system, tools=tools, messages=prompt.messages, breakpoints=prompt.breakpoints
    )


def _answer_pending(prompt: Prompt) -> Prompt:
    """Answer, with `MISSING_RESULT_TEXT`, the calls of the last assistant message that
    the tool messages ending the prompt leave open (every API refuses a partial run)."""
    messages = prompt.messages
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    if last < 0 or last == len(messages) - 1:
        return prompt
    if any(m.role != "tool" for m in messages[last + 1 :]):
        return prompt
    answered = {m.tool_call_id for m in messages[last + 1 :]}
    missing = tuple(
        Message(
            role="tool",
            parts=(TextPart(text=MISSING_RESULT_TEXT),),
            tool_call_id=c.id,
            name=c.name,
            is_error=True,
            source=messages[last].source,
        )
        for c in messages[last].tool_calls
        if c.id not in answered
    )
    if not missing:
        return prompt
    return Prompt(
        system=prompt.system,
        tools=prompt.tools,
        messages=messages + missing,
        breakpoints=prompt.breakpoints,
    )
