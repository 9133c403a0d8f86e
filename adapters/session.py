"""A small synchronous facade for orchestrators: one object per agent session.

Theory of operation
-------------------
`Session` wraps a `Log`, a `Packer` and a `Compactor` for one session id and
one provider format. An agent loop needs five verbs::

    session.user("...")                     # inputs are appended first
    request = session.prepare()             # pack, record, render
    reply = send(session.format, request.body, ...)   # (any HTTP client or SDK)
    answer = session.record(reply)          # assistant message + usage, or the error
    session.tool_result(call.id, output)    # for each call in answer.tool_calls

`prepare` runs, in order: overflow recovery (when the latest request ended in
a recorded context-overflow error and no recovery has been recorded since:
`Compactor.recover`, whose extractive summary and the recovery pack that
follows are deterministic and recorded), automatic compaction when enabled
(`Compactor.maybe_compact`: the policy's triggers decide), then
`Replayer.record` with the format's renderer, so the ``RequestIssued`` event
carries the hash of the exact body returned in `Request.body`.

Writes and concurrency
----------------------
``user`` and ``notify`` have no precondition: they append without
``expected_seq`` and never conflict, however many writers share the session.
The writes that decide from the session's state (``system``, ``tools``,
``tool_result``, ``record``) go through `Log.update`, the kernel's one loop
for "read the head, decide, append with ``expected_seq``, retry":

1. read the session head *h*, then the session's state at *h* or later;
2. compute the events from that state and check the write's precondition
   (``tool_result``: the call is open; ``record``: the request exists and has
   no response yet; ``system``/``tools``: what is in force differs, else
   nothing is appended and None is returned);
3. append with ``expected_seq = h``.

When another writer appended in between (another `Session` object on the
same session, another thread using the log directly, another process on the
same store), step 3 raises `AppendConflictError` inside the store's write
transaction and nothing is written; `Log.update` waits a random, doubling
time (`turnlog.log.Retries`) and goes back to step 1. A re-check can fail: if
the other writer answered the same call, ``tool_result`` raises
`InvalidEventError` naming the event that answered it. After ``attempts``
conflicts in a row the `AppendConflictError` is raised (naming the head the
last try found); nothing of the failed call was written. ``prepare`` gets the
same guarantee from `Replayer.record`: the prompt is packed at the head the
record names, and a conflict re-packs. A write whose precondition holds is
never lost and never duplicated; concurrent writers' events are kept in
commit order.

One `Session` object serializes its own calls with a lock, so threads
sharing it never conflict with each other. LMDB lets any number of
processes open one store: each opens the log itself (after ``fork()``, never
before) and makes its own `Session`.

Idempotency: every write takes ``key=``. The first call with a key appends
its events under that key (a batch of *n* > 1 events uses ``KEY/0`` ...
``KEY/n-1``). A repeated call with the same key, after a crash or a lost
answer, skips the precondition (the call it answered is closed by the first
call) and returns the stored positions with ``duplicate=True``, whatever
time the clock gives the retry (a key names the content, not the time);
``prepare(key=...)`` returns the stored request, re-rendered and checked
against its recorded hash. The same key with different content raises
`IdempotencyError`.

Two writes key themselves when no ``key=`` is given, because what they
append names itself: ``record`` of a response with an id (the provider's
``chatcmpl-...``, ``msg_...``, ``resp_...``) uses
``turnlog:response:REQUEST_SEQ:ID``, and ``tool_result`` uses
``turnlog:result:POS:CALL_ID``, where POS is the position of the message that
made the call (providers reuse call ids such as ``call_0`` across turns, so
the id alone would make a later result look like a retry of an earlier one).
Recording the same response, or the same result for the same call, again
returns the stored events with ``duplicate=True``; different content for an
answered request or call raises `InvalidEventError` saying so. ``user``,
``notify``, ``system``, ``tools``, ``prepare`` and errors without an id have
no natural key: pass ``key=`` to make their retries safe (a ``user`` call
retried without a key appends the message twice).

asyncio
-------
`AsyncSession` is the same facade awaited. `Session` and `AsyncSession` are two
shells around one sans-I/O core (`_Core`): each verb is one generator that
decides what to append, pack and render and yields the I/O it needs (a blocking
call into the log, or a conditional append). `Session` performs the effects
inline under its thread lock, with `Log.update` for the conditional appends;
`AsyncSession` performs them in a worker thread under an `asyncio.Lock` and
drives the conditional appends with `Retries`, waiting with ``asyncio.sleep``,
so neither LMDB nor PostgreSQL (through the same synchronous store) blocks the
event loop. The call to the provider between ``prepare`` and ``record`` is the
caller's; ``providers.asend`` makes it on the event loop itself (httpx's
``AsyncClient``), with no worker thread.

Nothing here reads a clock: ``time=`` (microseconds since the epoch) is
data, taken from the caller or from the ``clock`` callable the caller
supplies.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol, TypeVar, cast

import blake3
import msgspec
from turnlog import Compactor, Draft, Log, Packer, Policy, Replayer
from turnlog.compaction import Outcome, Summarizer
from turnlog.errors import (
    AppendConflictError,
    IdempotencyError,
    InvalidEventError,
    ReplayMismatchError,
    UnknownSessionError,
)
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    ImagePart,
    NotificationAdded,
    ProviderErrorReceived,
    RequestIssued,
    ResponseReceived,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from turnlog.log import Appended, Head, Retries
from turnlog.memories import MemoryManager
from turnlog.packing import CONTEXT_TOOLS, ModelTable, Packed, Projection, Renderer
from turnlog.replay import ReplayResult
from turnlog.tracing import span as otel_span
from turnlog.validation import (
    check_integer,
    check_text,
    check_type,
    invalid,
    refuse_unknown_options,
)

from .context_tools import _full_text, run_context_tool
from .providers import (
    PROVIDERS,
    ProviderError,
    RenderError,
    Reply,
    parse_http,
    parse_response,
    parse_stream,
    provider,
    render_args,
    renderer,
    renderer_for,
)
from .providers._wire import strict_schema_problems, tool_schema
from .redaction import Redactor, check_redactor

__all__ = [
    "Answer",
    "AsyncSession",
    "ContextToolResult",
    "Request",
    "ResponseLike",
    "SDKObject",
    "Session",
    "ToolLike",
]

#: A tool definition: a `ToolSpec`, or a mapping with ``name``, ``description`` and
#: ``parameters`` (a JSON Schema object or its text); OpenAI's ``{"type": "function",
#: "function": {...}}`` and Anthropic's ``input_schema`` are accepted too.
ToolLike = ToolSpec | Mapping[str, object]


class SDKObject(Protocol):
    """A reply object of an official SDK (a pydantic model: ``ChatCompletion``,
    ``Response``, ``Message``)."""

    def model_dump(
        self,
        *,
        mode: str = ...,
        exclude_unset: bool = ...,
    ) -> Mapping[str, object]:
        """The object as JSON values (``mode="json"``; with ``exclude_unset``, only the
        fields the provider sent)."""
        ...


#: What `Session.record` parses: a `Reply` (from ``providers.send``), a `ProviderError`
#: (the exception ``providers.send`` raises when no answer came), a JSON body (bytes, text
#: or the decoded object), an SDK reply object, or an SSE stream (bytes, text, or an
#: iterable of lines, blocks or decoded events).
ResponseLike = (
    Reply
    | ProviderError
    | bytes
    | str
    | Mapping[str, object]
    | SDKObject
    | Iterable[bytes | str | Mapping[str, object]]
)

_DEFAULT_POLICY = Policy()


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded request, ready to send.

    Attributes:
        body: the request body: the exact bytes whose blake3 the ``RequestIssued``
            record holds as ``rendered_hash``. Send these (``providers.send``).
        request_seq: seq of the ``RequestIssued`` record; give it to ``providers.send``.
        packed: the packed prompt, its decisions and stage reports.
        format: the wire format of ``body``.
        model: the model named in ``body``.
        compaction: what ran before packing (overflow recovery, or automatic
            compaction that did something); None when nothing ran.
        duplicate: True when a key already used returned the stored request.
    """

    body: bytes
    request_seq: int
    packed: Packed
    format: str
    model: str
    compaction: Outcome | None = None
    duplicate: bool = False

    def json(self) -> dict[str, object]:
        """The body decoded (a fresh dict each call), e.g. for an SDK's ``create(**...)``."""
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value

    @property
    def recovery(self) -> bool:
        """True when this is a recovery pack after a context-overflow error."""
        return self.packed.recovery


class ContextToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """A context tool's run: its output, appended as the call's ``ToolResultAdded``.

    Attributes:
        call_id, name: the call.
        output: the result text (what the model will read).
        is_error: the call could not run (the output says why).
        seq: where the ``ToolResultAdded`` landed.
        duplicate: a retry under the same key found it stored.
    """

    call_id: str
    name: str
    output: str
    is_error: bool
    seq: int
    duplicate: bool = False


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """What `Session.record` appended.

    Attributes:
        request_seq: the request answered (None when the session had none).
        message: the assistant message (None for an error or an empty reply).
        response: usage, stop reason, model (None for an error).
        error: the provider's error (None on success).
        first_seq / last_seq: the positions of the appended events.
        duplicate: True when a key already used returned the stored events.
    """

    request_seq: int | None
    message: AssistantMessageAdded | None = None
    response: ResponseReceived | None = None
    error: ProviderErrorReceived | None = None
    first_seq: int
    last_seq: int
    duplicate: bool = False

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The message's tool calls, now waiting for `Session.tool_result`."""
        if self.message is None:
            return ()
        return tuple(p for p in self.message.parts if isinstance(p, ToolCall))

    @property
    def text(self) -> str:
        """The message's text parts joined ("" for an error)."""
        if self.message is None:
            return ""
        return "".join(p.text for p in self.message.parts if isinstance(p, TextPart))

    @property
    def overflow(self) -> bool:
        """True for a context-overflow error: the next `Session.prepare` recovers."""
        return self.error is not None and self.error.overflow

    @property
    def done(self) -> bool:
        """True for a final answer: no error and no tool call."""
        return self.error is None and not self.tool_calls


_Build = Callable[[Projection | None, bool], Sequence[Body]]
_T = TypeVar("_T")


class _Call(NamedTuple):
    """An effect of a verb: a blocking call into the log (or the packer reading it)."""

    run: Callable[[], object]


class _Update(NamedTuple):
    """An effect of a verb: a conditional append (read the head, decide, append with
    ``expected_seq``, retry on a conflict: `Log.update`'s loop, `Retries`' rule)."""

    decide: Callable[[Head | None], list[Draft]]
    attempts: int


_Effect = _Call | _Update
#: A verb of the core: a generator that yields the I/O it needs and gets its results back.
_Steps = Generator[_Effect, object, _T]


def _io(fn: Callable[..., _T], *args: object, **kwargs: object) -> _Steps[_T]:
    """Ask the shell to run ``fn(*args, **kwargs)`` (blocking I/O) and give back its result."""
    result = yield _Call(functools.partial(fn, *args, **kwargs))
    return cast(_T, result)


def _update(decide: Callable[[Head | None], list[Draft]], attempts: int) -> _Steps[Appended | None]:
    """Ask the shell for a conditional append of what ``decide`` makes of the head."""
    result = yield _Update(decide, attempts)
    return cast(Appended | None, result)


class _Core:
    """The sans-I/O core shared by `Session` and `AsyncSession`.

    Every verb is written once, here, as a generator of effects (`_Call`: a
    blocking read or write of the log; `_Update`: a conditional append). It
    decides what to append, pack and render; the shells only perform the effects
    and send their results (or raise their errors) back into the generator:
    `Session` runs them inline under a thread lock, `AsyncSession` runs them in a
    worker thread and drives `_Update` with `Retries` and ``asyncio.sleep``.
    """

    def __init__(
        self,
        log: Log,
        session_id: str,
        *,
        model: str,
        format: str = "openai-chat",  # noqa: A002
        max_tokens: int | None = None,
        policy: Policy | None = None,
        stream: bool = False,
        extra: Mapping[str, object] | None = None,
        packer: Packer | None = None,
        summarizer: Summarizer | None = None,
        auto_compact: bool = False,
        clock: Callable[[], int] | None = None,
        attempts: int = 8,
        models: ModelTable | None = None,
        memory_session: str = "memories",
        redactor: Redactor | None = None,
    ) -> None:
        check_type(
            log,
            Log,
            "log",
            what="a turnlog Log",
            hint=f"open one and pass it: {type(self).__name__}"
            '(turnlog.open(path), "s1", model=...)',
        )
        if policy is not None:
            check_type(
                policy,
                Policy,
                "policy",
                what="None or a turnlog.Policy",
                hint="make one: turnlog.Policy(context_window=N, ...) (docs/policy.md)",
            )
        log.head(session_id)  # validates the id (InvalidEventError)
        wire = provider(format)
        check_text(model, "model", error=RenderError)
        if models is not None:
            check_type(
                models,
                ModelTable,
                "models",
                what="None or a turnlog.packing.ModelTable",
                hint="make one: ModelTable.shipped().merged(ModelTable.from_toml(text))",
            )
        if clock is not None and not callable(clock):
            invalid(
                "clock",
                "None or a function returning microseconds since the epoch",
                clock,
                hint="such as clock=lambda: time.time_ns() // 1000",
                with_type=True,
            )
        table = models if models is not None else ModelTable.shipped()
        info = table.lookup(model)
        #: The policy of a new session that names no policy: the model's, when known.
        self._model_policy = Policy.for_model(model, models=table) if info is not None else None
        if packer is not None:
            check_type(packer, Packer, "packer", what="None or a Packer of the same log")
        self.log = log
        self.id = session_id
        self.policy = policy
        self.packer = packer if packer is not None else Packer(log)
        if max_tokens is None and info is not None:
            # Every format gets the output cap the packer reserved room for (as
            # resolved: a reserve left at its default is scaled to the window), at most
            # what the model may write: the reserve of the policy the session is packed
            # with (the one in force, for a session that has one and no ``policy``).
            # Only a model the table does not know goes without one where the API
            # allows that: a cap above its output limit would be refused.
            max_tokens = min(self._output_reserve(), info.output_limit)
        if wire.max_tokens_required and max_tokens is None:
            raise RenderError(
                f"the {format} format needs max_tokens (the API requires it) and "
                f"model {model!r} is not in the model table; pass max_tokens= "
                "or a models= table that has the model"
            )
        check_integer(attempts, "attempts", min_value=1)
        if extra is not None and not isinstance(extra, Mapping):
            invalid(
                "extra",
                "None or a mapping of body fields",
                extra,
                hint='such as extra={"temperature": 0}',
                with_type=True,
                error=RenderError,
            )
        self.model = model
        self.format = format
        self.max_tokens = max_tokens
        fields: dict[str, object] = {}
        if stream:
            fields["stream"] = True
            fields.update(wire.stream_fields)
        fields.update(extra or {})
        self.extra: Mapping[str, object] = fields
        self.replayer = Replayer(self.packer)
        self.compactor = Compactor(log, self.packer, summarizer=summarizer)
        self.auto_compact = auto_compact
        self._clock = clock
        self._attempts = attempts
        self._render = renderer(
            format, model=model, max_tokens=max_tokens, blobs=log.blob, extra=self.extra
        )
        self._last_request: int | None = None
        #: The session `memory_save`, `memory_search` and `memory_forget` work on.
        self.memory_session = memory_session
        self._memories: MemoryManager | None = None
        #: Replaces secrets in what the verbs append (None: nothing is redacted).
        self.redactor = check_redactor(redactor)

    def __repr__(self) -> str:
        return f"<turnlog.adapters.{type(self).__name__} {self.id!r} {self.format} {self.model}>"

    # -- the verbs, as effects ----------------------------------------------------------------
    def _system_steps(
        self, name: str, text: str, position: int, time: int | None, key: str | None
    ) -> _Steps[Appended | None]:
        # Compared as it would be stored: a section redacted when set is the same text.
        stored = text if self.redactor is None else self.redactor.text(text)[0]

        def build(view: Projection | None, check: bool) -> list[Body]:
            if check:
                current = view.sections.get(name) if view is not None else None
                if (current is None and not text) or (
                    current is not None and current[:2] == (stored, position)
                ):
                    return []
            return [SystemSectionSet(name=name, text=text, position=position)]

        return (yield from self._write_steps(build, time=time, key=key))

    def _tools_steps(
        self, tools: Iterable[ToolLike], time: int | None, key: str | None
    ) -> _Steps[Appended | None]:
        if isinstance(tools, (str, bytes, Mapping, ToolSpec)) or not isinstance(tools, Iterable):
            invalid(
                "tools",
                "a list of tool definitions",
                tools,
                hint="pass every tool in a list, session.tools([tool, ...]); [] offers none",
                with_type=True,
                error=InvalidEventError,
            )
        # OpenAI also requires a strict schema to list every property as required
        every = self.format.startswith("openai")
        specs = tuple(_tool_spec(tool, i, every_required=every) for i, tool in enumerate(tools))
        seen: dict[str, int] = {}
        for i, spec in enumerate(specs):
            if spec.name in seen:
                # Every provider refuses a request whose tools share a name, after it
                # would have been recorded: refused here, before anything is appended.
                raise InvalidEventError(
                    f"tools {seen[spec.name]} and {i} are both named {spec.name!r}; a "
                    "request's tool names must be unique (the provider refuses the "
                    "request): give each tool its own name"
                )
            seen[spec.name] = i

        def build(view: Projection | None, check: bool) -> list[Body]:
            if check and view is not None and view.tools_pos >= 0 and view.tools == specs:
                return []
            return [ToolsSet(tools=specs)]

        return (yield from self._write_steps(build, time=time, key=key))

    def _tool_result_steps(
        self,
        call_id: str,
        output: str,
        is_error: bool,
        exit_code: int | None,
        time: int | None,
        key: str | None,
    ) -> _Steps[Appended]:
        stamp = self._time(time)

        def decide(head: Head | None) -> list[Draft]:
            view = self._view() if head is not None else None
            found = _find_call(view, call_id, open_only=True)
            use = key if key is not None or found is None else _result_key(*found)
            if found is None:
                # Answered already: by this result (a retry, under its key) or not.
                found = _find_call(view, call_id, open_only=False)
                if key is None and found is not None:
                    use = _result_key(*found)
                if found is None or use is None or not self._keyed(use):
                    raise InvalidEventError(_no_open_call(view, self.id, call_id))
            body = ToolResultAdded(
                call_id=call_id,
                tool_name=found[1].name,
                output=output,
                is_error=is_error,
                exit_code=exit_code,
            )
            return self._redacted(_drafts([body], stamp, use))

        try:
            done = yield from _update(decide, self._attempts)
        except IdempotencyError as exc:
            if key is not None:
                raise
            raise InvalidEventError(
                _answered_differently(self.id, f"call {call_id!r}", exc)
            ) from exc
        assert done is not None
        return done

    def _context_tool_steps(
        self, call: ToolCall, sessions: Iterable[str] | None, time: int | None, key: str | None
    ) -> _Steps[ContextToolResult]:
        check_type(
            call,
            ToolCall,
            "call",
            what="a ToolCall (one of answer.tool_calls)",
            hint="pass the call the model made, as record() returned it in answer.tool_calls",
        )
        if sessions is not None:
            if isinstance(sessions, str) or not isinstance(sessions, Iterable):
                invalid(
                    "sessions",
                    "None or a list of session ids",
                    sessions,
                    hint=f"pass one session in a list: sessions=[{sessions!r}]"
                    if isinstance(sessions, str)
                    else "",
                    with_type=True,
                )
            sessions = list(sessions)
            for name in sessions:
                check_type(name, str, "each of sessions", what="a session id (a str)")
        stamp = self._time(time)
        if key is not None:
            # A retry returns what the first call stored: the tool is not run again
            # (a second memory_save would save a second memory).
            stored = yield from _io(self._stored_context_result, call, key)
            if stored is not None:
                return stored
        head = yield from _io(self.log.head, self.id)
        view = (yield from _io(self._view)) if head is not None else None
        if _find_call(view, call.id, open_only=True) is None:
            raise InvalidEventError(_no_open_call(view, self.id, call.id))
        output, is_error = yield from _io(self._run_context_tool, call, sessions, stamp)
        done = yield from self._tool_result_steps(call.id, output, is_error, None, stamp, key)
        return ContextToolResult(
            call_id=call.id,
            name=call.name,
            output=output,
            is_error=is_error,
            seq=done.last_seq,
            duplicate=done.duplicate,
        )

    def _stored_context_result(self, call: ToolCall, key: str) -> ContextToolResult | None:
        """The result a call of the kit stored under ``key`` (None when none is stored).

        Raises:
            IdempotencyError: the key holds another event than this call's result.
        """
        seq = self._stored(key)
        if seq is None:
            return None
        event = self.log.get(self.id, seq)
        body = event.body
        if not isinstance(body, ToolResultAdded) or body.call_id != call.id:
            raise IdempotencyError(
                f"idempotency key {key!r} was used at {self.id}#{seq} for different "
                f"content (a {event.kind!r} event, not the result of call {call.id!r}); "
                "use a new key for a new call. Nothing was run or written"
            )
        return ContextToolResult(
            call_id=call.id,
            name=call.name,
            output=_full_text(self.log, event),
            is_error=body.is_error,
            seq=seq,
            duplicate=True,
        )

    def _run_context_tool(
        self, call: ToolCall, sessions: Iterable[str] | None, time: int | None
    ) -> tuple[str, bool]:
        return run_context_tool(
            self.log,
            self.id,
            call,
            self._effective_policy(),
            memories=self._memory_manager,
            sessions=sessions,
            time=time,
        )

    def _trace(self, what: str, seq: int, attributes: Mapping[str, int | str]) -> None:
        """A span for a prepared or recorded request (no-op without opentelemetry):
        the GenAI attributes and the request record's hashes, read from the log."""
        record = self.log.get(self.id, seq).body
        names: dict[str, int | str] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": self.model,
            "gen_ai.system": self.format,
            "turnlog.session": self.id,
            "turnlog.request_seq": seq,
            "turnlog.step": what,
        }
        if isinstance(record, RequestIssued):
            names["turnlog.prompt_hash"] = record.prompt_hash
            names["turnlog.policy_hash"] = record.policy_hash
        names.update(attributes)
        with otel_span(f"chat {self.model}", names):
            pass

    def _memory_manager(self) -> MemoryManager:
        if self._memories is None:
            self._memories = MemoryManager(self.log, self.memory_session)
        return self._memories

    def _effective_policy(self) -> Policy:
        return (
            self.policy
            or self.packer.policy_in_force(self.id)
            or self._model_policy
            or _DEFAULT_POLICY
        )

    def _open_calls_steps(self) -> _Steps[tuple[ToolCall, ...]]:
        head = yield from _io(self.log.head, self.id)
        if head is None:
            return ()
        view = yield from _io(self._view)
        return tuple(_open_calls(view).values())

    def _prepare_steps(self, time: int | None, key: str | None) -> _Steps[Request]:
        time = self._time(time)
        if key is not None:
            stored = yield from _io(self._stored, key)
            if stored is not None:
                return (yield from _io(self._stored_request, stored))
        compaction: Outcome | None = None
        view = yield from _io(self._view)
        policy = yield from _io(self._policy)
        if view.overflow_pending and not _recovered(view):
            compaction = yield from _io(self.compactor.recover, self.id, policy=policy, time=time)
        elif self.auto_compact:
            outcome = yield from _io(
                self.compactor.maybe_compact, self.id, policy=policy, time=time
            )
            compaction = outcome if outcome.status != "skipped" else None
        recorded = yield from _io(
            self.replayer.record,
            self.id,
            policy=policy,
            model=self.model,
            time=time,
            format=self.format,
            render=self._render,
            attempts=self._attempts,
            key=key,
            render_args=render_args(max_tokens=self.max_tokens, extra=self.extra),
        )
        self._last_request = recorded.request_seq
        yield from _io(
            self._trace,
            "prepare",
            recorded.request_seq,
            {
                "turnlog.prompt_hash": recorded.packed.prompt.hash,
                "turnlog.policy_hash": recorded.packed.policy_hash,
                "gen_ai.usage.input_tokens": recorded.packed.tokens,
            },
        )
        return Request(
            body=recorded.rendered,
            request_seq=recorded.request_seq,
            packed=recorded.packed,
            format=self.format,
            model=self.model,
            compaction=compaction,
        )

    def _record_steps(
        self, reply: Reply, request_seq: int | None, time: int | None, key: str | None
    ) -> _Steps[Answer]:
        time = self._time(time)
        seq = request_seq
        if seq is None:
            seq = (
                reply.error.request_seq
                if reply.error is not None
                else (reply.response.request_seq if reply.response is not None else None)
            )
        if seq is None:
            seq = self._last_request
        if seq is None:
            head = yield from _io(self.log.head, self.id)
            if head is not None:
                view = yield from _io(self._view)
                seq = _latest_request(view, self.id)
        bodies = _with_request(reply, seq)

        def build(view: Projection | None, check: bool) -> Sequence[Body]:
            if check and seq is not None:
                self._check_request(view, seq, answering=reply.error is None)
            return bodies

        natural = key is None and reply.response is not None and bool(reply.response.response_id)
        use = (
            _response_key(seq, reply.response.response_id)
            if natural and reply.response is not None
            else key
        )
        try:
            done = yield from self._write_steps(build, time=time, key=use)
        except IdempotencyError as exc:
            if not natural:
                raise
            raise InvalidEventError(_answered_differently(self.id, f"request {seq}", exc)) from exc
        assert done is not None
        message = next((b for b in bodies if isinstance(b, AssistantMessageAdded)), None)
        answer = next((b for b in bodies if isinstance(b, ResponseReceived)), None)
        if seq is not None:
            usage = answer.usage if answer is not None else None
            yield from _io(
                self._trace,
                "record",
                seq,
                {}
                if usage is None
                else {
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                    "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                    "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
                },
            )
        error = next((b for b in bodies if isinstance(b, ProviderErrorReceived)), None)
        return Answer(
            request_seq=seq,
            message=message,
            response=answer,
            error=error,
            first_seq=done.first_seq,
            last_seq=done.last_seq,
            duplicate=done.duplicate,
        )

    def _compact_steps(self, time: int | None) -> _Steps[Outcome]:
        policy = yield from _io(self._policy)
        return (
            yield from _io(
                self.compactor.compact,
                self.id,
                policy=policy,
                reason="manual",
                time=self._time(time),
            )
        )

    def _append_steps(
        self, bodies: Sequence[Body], *, time: int | None, key: str | None
    ) -> _Steps[Appended]:
        """Append events that need no precondition: nothing to conflict with."""
        return (
            yield from _io(
                self.log.append, self.id, self._redacted(_drafts(bodies, self._time(time), key))
            )
        )

    def _write_steps(
        self, build: _Build, *, time: int | None, key: str | None
    ) -> _Steps[Appended | None]:
        """Append what ``build`` makes of the session's view, conditionally."""
        stamp = self._time(time)

        def decide(head: Head | None) -> list[Draft]:
            # A stored key is a retry: its precondition was used up by the first call.
            retry = key is not None and self._keyed(key)
            view = self._view() if head is not None else None
            return self._redacted(_drafts(build(view, not retry), stamp, key))

        return (yield from _update(decide, self._attempts))

    def _redacted(self, drafts: list[Draft]) -> list[Draft]:
        """The drafts with their secrets replaced, when the session has a redactor."""
        return drafts if self.redactor is None else self.redactor.drafts(drafts)

    # -- reading back (blocking; the async shell runs these in a thread) ----------------------
    def _requests(self) -> list[int]:
        if self.log.head(self.id) is None:
            return []
        return self.replayer.requests(self.id)

    def _replay(self, request_seq: int) -> ReplayResult:
        return self.replayer.replay(self.id, request_seq, render=self._renderer_for(request_seq))

    def _explain(self, request_seq: int | None) -> Packed:
        if request_seq is None:
            seqs = self._requests()
            if not seqs:
                raise InvalidEventError(
                    f"session {self.id!r} has no request to explain; call prepare() first"
                )
            request_seq = seqs[-1]
        return self.replayer.explain(self.id, request_seq)

    # -- internals ----------------------------------------------------------------------------
    def _time(self, time: int | None) -> int | None:
        if time is not None or self._clock is None:
            return time
        return self._clock()

    def _output_reserve(self) -> int:
        """The output reserve of the policy the next request is packed with."""
        policy = self._policy()
        if policy is None and self.log.head(self.id) is not None:
            policy = self.packer.policy_in_force(self.id)
        return (policy or Policy()).resolved().output_reserve

    def _body_fields(self, extra: Mapping[str, object], max_tokens: int | None) -> None:
        """Render the next requests with these top-level fields and output cap. Each
        request records them (``render_args``), so replay renders it as it was sent."""
        if render_args(max_tokens=max_tokens, extra=extra) == render_args(
            max_tokens=self.max_tokens, extra=self.extra
        ):  # (compared as recorded: 1, 1.0 and True are three values)
            return
        self._render = renderer(
            self.format, model=self.model, max_tokens=max_tokens, blobs=self.log.blob, extra=extra
        )
        self.extra = dict(extra)
        self.max_tokens = max_tokens

    def _policy(self) -> Policy | None:
        """The policy to pack with: this session's, else None (the one in force) for a
        session that has one, else the model's (None when the table has no entry)."""
        if self.policy is not None or self._model_policy is None:
            return self.policy
        if self.log.head(self.id) is not None and self.packer.policy_in_force(self.id):
            return None
        return self._model_policy

    def _view(self) -> Projection:
        """The session's projection, at its head or later (the packer's, shared)."""
        policy = (
            self.policy
            or self.packer.policy_in_force(self.id)
            or self._model_policy
            or _DEFAULT_POLICY
        )
        return self.packer.projection(self.id, self.packer.counter_for(policy))

    def _stored(self, key: str) -> int | None:
        return self.log.find_key(self.id, key)

    def _keyed(self, key: str) -> bool:
        """True when a write under ``key`` (one event, or a batch: ``KEY/0``...) is stored."""
        return self._stored(key) is not None or self._stored(f"{key}/0") is not None

    def _check_request(self, view: Projection | None, seq: int, *, answering: bool) -> None:
        try:
            event = self.log.get(self.id, seq) if view is not None else None
        except UnknownSessionError:
            event = None
        if event is None or not isinstance(event.body, RequestIssued):
            kind = event.kind if event is not None else "missing"
            raise InvalidEventError(
                f"{self.id}#{seq} is not a request record (found "
                f"{kind!r}); pass the request_seq of a prepared request"
            )
        if not answering or view is None:
            return
        for pos in view.responses:
            found = view.events[pos]
            body = found.body
            if (
                found.session == self.id
                and isinstance(body, ResponseReceived)
                and body.request_seq == seq
            ):
                raise InvalidEventError(
                    f"request {self.id}#{seq} was already answered by the response at "
                    f"{self.id}#{found.seq}; record a retried answer with the same key to "
                    "get the stored events back"
                )

    def _stored_request(self, seq: int) -> Request:
        event = self.log.get(self.id, seq)
        if not isinstance(event.body, RequestIssued):
            raise InvalidEventError(
                f"the key of this prepare() is stored at {self.id}#{seq}, "
                f"a {event.kind!r} event; use a new key for a request"
            )
        packed = self.replayer.repack(self.id, seq)
        render = self._renderer_for(seq) or self._render
        body = render(packed.prompt)
        if blake3.blake3(body).hexdigest() != event.body.rendered_hash:
            raise ReplayMismatchError(
                f"the request stored under this key ({self.id}#{seq}) "
                "does not re-render to its recorded hash; was it "
                "recorded with another format, max_tokens or extra?"
            )
        return Request(
            body=body,
            request_seq=seq,
            packed=packed,
            format=event.body.format,
            model=event.body.model,
            duplicate=True,
        )

    def _renderer_for(self, request_seq: int) -> Renderer | None:
        event = self.log.get(self.id, request_seq)
        body = event.body
        if not isinstance(body, RequestIssued) or body.format not in PROVIDERS or not body.model:
            return None
        # The record names the renderer's parameters: build the same renderer.
        return renderer_for(body, blobs=self.log.blob)

    def _parse(self, response: ResponseLike, *, status: int | None, stream: bool | None) -> Reply:
        fmt = self.format
        if isinstance(response, Reply):
            return response
        if isinstance(response, ProviderError):
            return Reply(error=response.error)
        check_integer(status, "status", min_value=100, max_value=599, optional=True)
        if isinstance(response, (bytes, bytearray, memoryview, str)):
            data = bytes(response) if not isinstance(response, str) else response
            return parse_http(fmt, 200 if status is None else status, data, stream=stream)
        if status is not None:
            raise InvalidEventError("status= goes with a body given as bytes or text")
        if isinstance(response, Mapping):
            return parse_response(fmt, response)
        dump = getattr(response, "model_dump", None)
        if callable(dump):
            # Only what the provider sent: an item kept byte for byte (a compaction item)
            # must not gain the SDK's defaults (``"created_by": null``).
            return parse_response(fmt, dump(mode="json", exclude_unset=True))
        return parse_stream(fmt, response)  # type: ignore[arg-type]


class Session(_Core):
    """One agent session of a log, driven by an orchestrator (see the module docstring).

    Parameters:
        log: the log (``turnlog.open(...)``).
        session_id: the session; created by its first write.
        model: the model named in every request body.
        format: ``openai-chat``, ``openai-responses`` or ``anthropic``.
        max_tokens: the output cap of every request. When None and the model is in
            the model table, the packing policy's ``output_reserve`` (the room packing
            leaves for the reply: the policy in force for a session that has one and
            no ``policy``), at most the model's output limit, in every format; for a
            model the table does not know, ``openai-chat`` and ``openai-responses``
            send no cap and ``anthropic`` (whose API requires one) refuses.
        policy: the packing policy (appended as ``PolicySet`` by the first `prepare`
            when it is not the one in force). When None: the one in force, and for a
            session with none yet, ``Policy.for_model(model)`` when the model is in
            the model table (window, output reserve and tokenizer of the model), else
            the default `Policy`.
        stream: ask for a streamed reply (``"stream": true``; for ``openai-chat``
            also ``stream_options.include_usage``).
        extra: further top-level body fields (``temperature``, ``tool_choice``...).
        packer: a packer to share (one per log is best); a new one when None.
        summarizer: the summarizer of automatic compaction (the offline extractive
            one when None; overflow recovery always uses the extractive one).
        auto_compact: run `Compactor.maybe_compact` before each pack.
        clock: called for ``time`` when a call gives none (microseconds since the
            epoch); no time is recorded when None.
        attempts: tries per write when the head keeps moving (see the module docstring).
        models: the model table ``model`` is looked up in (the shipped one when None).
        memory_session: the session the context tools' memory calls read and change.
        redactor: a `turnlog.adapters.redaction.Redactor`: every event the verbs
            append has its secrets replaced by placeholders first (what kinds were
            replaced is in its meta); None (the default) redacts nothing.

    Raises:
        RenderError: an unknown format, an empty model, ``anthropic`` without
            ``max_tokens`` for a model the table does not know, or a bad
            ``max_tokens`` or ``extra`` (refused here, before anything is recorded).
        InvalidEventError: a bad session id.
    """

    @refuse_unknown_options(
        "Session()", usage='Session(turnlog.open(path), "s1", model="gpt-4o-mini")'
    )
    def __init__(
        self,
        log: Log,
        session_id: str,
        *,
        model: str,
        format: str = "openai-chat",  # noqa: A002
        max_tokens: int | None = None,
        policy: Policy | None = None,
        stream: bool = False,
        extra: Mapping[str, object] | None = None,
        packer: Packer | None = None,
        summarizer: Summarizer | None = None,
        auto_compact: bool = False,
        clock: Callable[[], int] | None = None,
        attempts: int = 8,
        models: ModelTable | None = None,
        memory_session: str = "memories",
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(
            log,
            session_id,
            model=model,
            format=format,
            max_tokens=max_tokens,
            policy=policy,
            stream=stream,
            extra=extra,
            packer=packer,
            summarizer=summarizer,
            auto_compact=auto_compact,
            clock=clock,
            attempts=attempts,
            models=models,
            memory_session=memory_session,
            redactor=redactor,
        )
        self._lock = threading.RLock()

    def _run(self, steps: _Steps[_T]) -> _T:
        """The synchronous shell: perform each effect inline, under this object's lock."""
        with self._lock:
            effect = next(steps)
            while True:
                try:
                    if isinstance(effect, _Update):
                        result: object = self.log.update(
                            self.id, effect.decide, attempts=effect.attempts
                        )
                    else:
                        result = effect.run()
                except BaseException as exc:  # given back to the verb
                    try:
                        effect = steps.throw(exc)
                    except StopIteration as stop:
                        return cast(_T, stop.value)
                    continue
                try:
                    effect = steps.send(result)
                except StopIteration as stop:
                    return cast(_T, stop.value)

    # -- inputs -----------------------------------------------------------------------------
    @refuse_unknown_options("Session.system()")
    def system(
        self,
        name: str,
        text: str,
        *,
        position: int = 0,
        time: int | None = None,
        key: str | None = None,
    ) -> Appended | None:
        """Set (or with ``text=""`` clear) a named system section.

        Returns:
            Where the ``SystemSectionSet`` landed, or None when that text at that
            position is already in force (nothing appended).
        """
        return self._run(self._system_steps(name, text, position, time, key))

    @refuse_unknown_options("Session.tools()")
    def tools(
        self, tools: Iterable[ToolLike], *, time: int | None = None, key: str | None = None
    ) -> Appended | None:
        """Declare the full set of tools offered from now on.

        Returns:
            Where the ``ToolsSet`` landed, or None when these tools are already in
            force (nothing appended).

        Raises:
            InvalidEventError: ``tools`` is not a list of definitions (None, or one
                tool not in a list), a tool definition without a name, two tools
                sharing a name, or a schema that is neither a JSON object nor its
                text. Nothing is appended.
        """
        return self._run(self._tools_steps(tools, time, key))

    @refuse_unknown_options("Session.user()")
    def user(
        self,
        text: str,
        *,
        images: Sequence[ImagePart] = (),
        name: str = "",
        time: int | None = None,
        key: str | None = None,
    ) -> Appended:
        """Append a user message (it starts a new turn)."""
        return self._run(
            self._append_steps(
                [UserMessageAdded(text=text, images=tuple(images), name=name)], time=time, key=key
            )
        )

    @refuse_unknown_options("Session.notify()")
    def notify(
        self, source: str, text: str, *, time: int | None = None, key: str | None = None
    ) -> Appended:
        """Append a notification: something the runtime tells the model between turns."""
        return self._run(
            self._append_steps([NotificationAdded(source=source, text=text)], time=time, key=key)
        )

    @refuse_unknown_options("Session.tool_result()")
    def tool_result(
        self,
        call_id: str,
        output: str,
        *,
        is_error: bool = False,
        exit_code: int | None = None,
        time: int | None = None,
        key: str | None = None,
    ) -> Appended:
        """Append the result of an open tool call; the tool's name is taken from the call.

        Raises:
            InvalidEventError: no call ``call_id`` is waiting for a result (unknown,
                rewound, or already answered: the message names the answer).
        """
        return self._run(self._tool_result_steps(call_id, output, is_error, exit_code, time, key))

    def context_tools(self) -> tuple[ToolSpec, ...]:
        """The context tools' specs (``read_output``, ``search_history``,
        ``expand_summary``, ``memory_save``, ``memory_search``, ``memory_forget``):
        pass them to `tools` with your own. Once they are in force, truncation and
        clip notices of new outputs name ``read_output`` and the ref to pass it."""
        return CONTEXT_TOOLS

    @refuse_unknown_options("Session.call_context_tool()")
    def call_context_tool(
        self,
        call: ToolCall,
        *,
        sessions: Iterable[str] | None = None,
        time: int | None = None,
        key: str | None = None,
    ) -> ContextToolResult:
        """Run a call of a context tool and append its ``ToolResultAdded``.

        Parameters:
            call: an open call (from ``answer.tool_calls``) of one of the kit's tools.
            sessions: further sessions ``search_history`` may search (this one only
                when None).

        Returns:
            The output (within the policy's truncation limits; a bad call gets an
            error output with ``is_error``) and where the result landed.

        Raises:
            InvalidEventError: the call is not open (as for `tool_result`).
        """
        return self._run(self._context_tool_steps(call, sessions, time, key))

    def open_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls in the session's view still waiting for a result, oldest first."""
        return self._run(self._open_calls_steps())

    # -- requests ---------------------------------------------------------------------------
    @refuse_unknown_options("Session.prepare()")
    def prepare(self, *, time: int | None = None, key: str | None = None) -> Request:
        """Recover or compact when due, pack, record the request, render its body.

        Returns:
            The `Request`: ``body`` to send, ``request_seq`` to answer with `record`.

        Raises:
            UnknownSessionError: nothing was appended to the session yet.
            BudgetExceededError: the mandatory tail does not fit the policy's window.
            AppendConflictError: the head kept moving (see the module docstring).
        """
        return self._run(self._prepare_steps(time, key))

    @refuse_unknown_options("Session.record()")
    def record(
        self,
        response: ResponseLike,
        *,
        status: int | None = None,
        stream: bool | None = None,
        request_seq: int | None = None,
        time: int | None = None,
        key: str | None = None,
    ) -> Answer:
        """Parse a provider answer and append it: ``AssistantMessageAdded`` and
        ``ResponseReceived``, or ``ProviderErrorReceived``.

        Parameters:
            response: see `ResponseLike`. Bytes and text are a JSON body, or an SSE
                stream when ``stream`` is True (None guesses from the first bytes); an
                SDK object (``completion``, ``response``, ``message``) is read with
                its ``model_dump``.
            status: the HTTP status of ``response`` (bytes or text); 400 and above
                is an error body (kept as text when it is not JSON).
            request_seq: the request answered; by default the one the reply names,
                else the last one this object prepared, else the session's latest.

        Returns:
            The `Answer`; ``answer.tool_calls`` are the calls now waiting for results,
            ``answer.overflow`` says the next `prepare` recovers.

        Raises:
            DecodeError: a successful answer that is not the provider's shape
                (nothing is appended).
            InvalidEventError: ``request_seq`` is not a request of this session, or it
                was answered already (errors do not answer a request: a request can
                meet errors and then one response).
        """
        reply = self._parse(response, status=status, stream=stream)
        return self._run(self._record_steps(reply, request_seq, time, key))

    @refuse_unknown_options("Session.compact()")
    def compact(self, *, time: int | None = None) -> Outcome:
        """Compact now (a manual compaction, with the session's summarizer)."""
        return self._run(self._compact_steps(time))

    # -- reading back -------------------------------------------------------------------------
    @property
    def head(self) -> Head | None:
        """The session's last event (None before the first write)."""
        return self.log.head(self.id)

    def requests(self) -> list[int]:
        """Seqs of the session's request records, oldest first."""
        return self._requests()

    @refuse_unknown_options("Session.replay()")
    def replay(self, request_seq: int) -> ReplayResult:
        """Re-pack and re-render a recorded request and compare both hashes with the
        record (the renderer is rebuilt from the record's format, model and
        ``max_tokens`` and this session's ``stream`` and ``extra``)."""
        return self._replay(request_seq)

    @refuse_unknown_options("Session.explain()")
    def explain(self, request_seq: int | None = None) -> Packed:
        """A recorded request (the latest when None) re-packed with its per-event
        decisions and stage reports.

        Raises:
            InvalidEventError: the session has no request.
        """
        return self._explain(request_seq)


class AsyncSession(_Core):
    """`Session` on asyncio: the same verbs, awaited (``await session.prepare()``).

    It takes `Session`'s parameters and runs the same core: every decision (what
    to append, the preconditions, natural keys, packing and rendering) is the one
    `Session` makes. Only the I/O differs: each read or write of the log runs in
    a worker thread (``asyncio.to_thread``), so neither LMDB nor PostgreSQL blocks
    the event loop, and a conditional write waits between its tries with
    ``asyncio.sleep`` (`turnlog.log.Retries` decides when and how often). The
    pack-and-record of `prepare` and the compactions run whole in the worker
    thread (their own conflict retries wait there, not on the loop).

    One object serializes its own calls with an `asyncio.Lock`; any number of
    `AsyncSession` objects (on one session or many, one log or several) run
    concurrently on one loop. ``head`` is a coroutine method here, not a property.
    """

    @refuse_unknown_options(
        "AsyncSession()", usage='AsyncSession(turnlog.open(path), "s1", model="gpt-4o-mini")'
    )
    def __init__(
        self,
        log: Log,
        session_id: str,
        *,
        model: str,
        format: str = "openai-chat",  # noqa: A002
        max_tokens: int | None = None,
        policy: Policy | None = None,
        stream: bool = False,
        extra: Mapping[str, object] | None = None,
        packer: Packer | None = None,
        summarizer: Summarizer | None = None,
        auto_compact: bool = False,
        clock: Callable[[], int] | None = None,
        attempts: int = 8,
        models: ModelTable | None = None,
        memory_session: str = "memories",
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(
            log,
            session_id,
            model=model,
            format=format,
            max_tokens=max_tokens,
            policy=policy,
            stream=stream,
            extra=extra,
            packer=packer,
            summarizer=summarizer,
            auto_compact=auto_compact,
            clock=clock,
            attempts=attempts,
            models=models,
            memory_session=memory_session,
            redactor=redactor,
        )
        self._lock = asyncio.Lock()

    async def _run(self, steps: _Steps[_T]) -> _T:
        """The asyncio shell: each effect in a worker thread, one verb at a time."""
        async with self._lock:
            effect = next(steps)
            while True:
                try:
                    if isinstance(effect, _Update):
                        result: object = await self._update(effect)
                    else:
                        result = await asyncio.to_thread(effect.run)
                except BaseException as exc:  # given back to the verb
                    try:
                        effect = steps.throw(exc)
                    except StopIteration as stop:
                        return cast(_T, stop.value)
                    continue
                try:
                    effect = steps.send(result)
                except StopIteration as stop:
                    return cast(_T, stop.value)

    async def _update(self, effect: _Update) -> Appended | None:
        """`Log.update`'s loop with `Retries`, waiting on the event loop."""
        retries = Retries(self.id, attempts=effect.attempts)

        def attempt() -> tuple[Head | None, list[Draft]]:
            head = self.log.head(self.id)
            return head, effect.decide(head)

        while True:
            delay = retries.next()
            if delay:
                await asyncio.sleep(delay)
            head, drafts = await asyncio.to_thread(attempt)
            if not drafts:
                return None
            try:
                return await asyncio.to_thread(
                    self.log.append, self.id, drafts, expected_seq=retries.expect(head)
                )
            except AppendConflictError as exc:
                retries.conflict(exc)

    # -- inputs -----------------------------------------------------------------------------
    @refuse_unknown_options("AsyncSession.system()")
    async def system(
        self,
        name: str,
        text: str,
        *,
        position: int = 0,
        time: int | None = None,
        key: str | None = None,
    ) -> Appended | None:
        """`Session.system`, awaited."""
        return await self._run(self._system_steps(name, text, position, time, key))

    @refuse_unknown_options("AsyncSession.tools()")
    async def tools(
        self, tools: Iterable[ToolLike], *, time: int | None = None, key: str | None = None
    ) -> Appended | None:
        """`Session.tools`, awaited."""
        return await self._run(self._tools_steps(tools, time, key))

    @refuse_unknown_options("AsyncSession.user()")
    async def user(
        self,
        text: str,
        *,
        images: Sequence[ImagePart] = (),
        name: str = "",
        time: int | None = None,
        key: str | None = None,
    ) -> Appended:
        """`Session.user`, awaited."""
        return await self._run(
            self._append_steps(
                [UserMessageAdded(text=text, images=tuple(images), name=name)], time=time, key=key
            )
        )

    @refuse_unknown_options("AsyncSession.notify()")
    async def notify(
        self, source: str, text: str, *, time: int | None = None, key: str | None = None
    ) -> Appended:
        """`Session.notify`, awaited."""
        return await self._run(
            self._append_steps([NotificationAdded(source=source, text=text)], time=time, key=key)
        )

    @refuse_unknown_options("AsyncSession.tool_result()")
    async def tool_result(
        self,
        call_id: str,
        output: str,
        *,
        is_error: bool = False,
        exit_code: int | None = None,
        time: int | None = None,
        key: str | None = None,
    ) -> Appended:
        """`Session.tool_result`, awaited."""
        return await self._run(
            self._tool_result_steps(call_id, output, is_error, exit_code, time, key)
        )

    def context_tools(self) -> tuple[ToolSpec, ...]:
        """`Session.context_tools`."""
        return CONTEXT_TOOLS

    @refuse_unknown_options("AsyncSession.call_context_tool()")
    async def call_context_tool(
        self,
        call: ToolCall,
        *,
        sessions: Iterable[str] | None = None,
        time: int | None = None,
        key: str | None = None,
    ) -> ContextToolResult:
        """`Session.call_context_tool`, awaited."""
        return await self._run(self._context_tool_steps(call, sessions, time, key))

    async def open_calls(self) -> tuple[ToolCall, ...]:
        """`Session.open_calls`, awaited."""
        return await self._run(self._open_calls_steps())

    # -- requests ---------------------------------------------------------------------------
    @refuse_unknown_options("AsyncSession.prepare()")
    async def prepare(self, *, time: int | None = None, key: str | None = None) -> Request:
        """`Session.prepare`, awaited."""
        return await self._run(self._prepare_steps(time, key))

    @refuse_unknown_options("AsyncSession.record()")
    async def record(
        self,
        response: ResponseLike,
        *,
        status: int | None = None,
        stream: bool | None = None,
        request_seq: int | None = None,
        time: int | None = None,
        key: str | None = None,
    ) -> Answer:
        """`Session.record`, awaited (the reply is parsed on the loop: no I/O)."""
        reply = self._parse(response, status=status, stream=stream)
        return await self._run(self._record_steps(reply, request_seq, time, key))

    @refuse_unknown_options("AsyncSession.compact()")
    async def compact(self, *, time: int | None = None) -> Outcome:
        """`Session.compact`, awaited."""
        return await self._run(self._compact_steps(time))

    # -- reading back -------------------------------------------------------------------------
    async def head(self) -> Head | None:
        """The session's last event (None before the first write)."""
        return await asyncio.to_thread(self.log.head, self.id)

    async def requests(self) -> list[int]:
        """`Session.requests`, awaited."""
        return await asyncio.to_thread(self._requests)

    @refuse_unknown_options("AsyncSession.replay()")
    async def replay(self, request_seq: int) -> ReplayResult:
        """`Session.replay`, awaited."""
        return await asyncio.to_thread(self._replay, request_seq)

    @refuse_unknown_options("AsyncSession.explain()")
    async def explain(self, request_seq: int | None = None) -> Packed:
        """`Session.explain`, awaited."""
        return await asyncio.to_thread(self._explain, request_seq)


# -- helpers ------------------------------------------------------------------------------------
def _batch_key(key: str | None, index: int, size: int) -> str | None:
    if key is None:
        return None
    return key if size == 1 else f"{key}/{index}"


def _drafts(bodies: Sequence[Body], time: int | None, key: str | None) -> list[Draft]:
    return [
        Draft(body=body, time=time, key=_batch_key(key, i, len(bodies)))
        for i, body in enumerate(bodies)
    ]


def _natural_key(kind: str, scope: str, ident: str) -> str:
    """The key the facade gives a write that names itself: ``turnlog:KIND:SCOPE:ID``,
    with a long id replaced by its hash (a key holds at most 254 UTF-8 bytes)."""
    if len(ident.encode()) > 160:
        ident = "blake3:" + blake3.blake3(ident.encode()).hexdigest()[:40]
    return f"turnlog:{kind}:{scope}:{ident}"


def _result_key(pos: int, call: ToolCall) -> str:
    # Scoped by the call's position: providers reuse call ids (``call_0``) across turns.
    return _natural_key("result", str(pos), call.id)


def _response_key(request_seq: int | None, response_id: str) -> str:
    # Scoped by the request: a response id names one answer to one request.
    return _natural_key("response", "-" if request_seq is None else str(request_seq), response_id)


def _answered_differently(session: str, what: str, exc: IdempotencyError) -> str:
    return (
        f"{what} of session {session!r} was already answered with different content "
        f"({exc}); a repeated call with the same content returns the stored events"
    )


def _tool_spec(tool: ToolLike, index: int, *, every_required: bool = False) -> ToolSpec:
    """``tool`` as a `ToolSpec`, a strict one checked (``every_required``: as OpenAI
    checks it)."""
    if isinstance(tool, ToolSpec):
        if tool.strict:
            _check_strict(tool, every_required)
        return tool
    check_type(
        tool, Mapping, f"tool {index}", what="a ToolSpec or a mapping", error=InvalidEventError
    )
    spec = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    assert isinstance(spec, Mapping)
    name = spec.get("name")
    description = spec.get("description") or ""
    schema = spec.get("parameters", spec.get("input_schema", {}))
    if not isinstance(name, str) or not name:
        invalid(f"tool {index}: the name", "a non-empty str", name, error=InvalidEventError)
    check_type(description, str, f"tool {name!r}: the description", error=InvalidEventError)
    if isinstance(schema, str):
        parameters = schema
    elif isinstance(schema, Mapping):
        parameters = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    else:
        raise InvalidEventError(
            f"tool {name!r}: parameters must be a JSON Schema object or "
            f"its text, found {type(schema).__name__}"
        )
    strict = spec.get("strict", False)
    if strict is None:  # the OpenAI SDKs' "not given"
        strict = False
    check_type(strict, bool, f"tool {name!r}: strict", error=InvalidEventError)
    out = ToolSpec(name=name, description=description, parameters=parameters, strict=strict)
    if strict:
        _check_strict(out, every_required)
    return out


def _check_strict(tool: ToolSpec, every_required: bool) -> None:
    """Refuse a strict tool whose schema, as rendered, the provider refuses as strict:
    an object of it without ``additionalProperties`` false (OpenAI and Anthropic), or
    (``every_required``, OpenAI) one that does not list every property as required.
    The provider would refuse the request after it was recorded."""
    if tool.freeform:
        raise InvalidEventError(
            f"tool {tool.name!r} is freeform and strict: a freeform tool takes raw text, "
            "with no schema to hold its input to; leave strict false"
        )
    try:
        schema = tool_schema(tool)  # what the renderers send: "type" and "properties" added
    except RenderError as exc:
        raise InvalidEventError(str(exc)) from None
    problems = strict_schema_problems(tool.name, schema, every_required=every_required)
    if problems:
        raise InvalidEventError(
            f"tool {tool.name!r} is strict, and the provider refuses its schema: "
            f'{problems[0]} Add "additionalProperties": false to every object of it'
            + (" and list every property as required" if every_required else "")
            + ", or leave strict false"
        )


def _open_calls(view: Projection) -> dict[str, ToolCall]:
    found: dict[str, ToolCall] = {}
    for unit in view.units:
        if not unit.open_calls:
            continue
        body = view.items[unit.items[0]].event.body
        assert isinstance(body, AssistantMessageAdded)
        for part in body.parts:
            if isinstance(part, ToolCall) and part.id in unit.open_calls:
                found[part.id] = part
    return found


def _find_call(
    view: Projection | None, call_id: str, *, open_only: bool
) -> tuple[int, ToolCall] | None:
    """The latest call ``call_id`` in the view (an open one only, when asked) and the
    lineage position of the message that made it."""
    if view is None:
        return None
    for unit in reversed(view.units):
        if call_id not in unit.calls or (open_only and call_id not in unit.open_calls):
            continue
        item = view.items[unit.items[0]]
        body = item.event.body
        assert isinstance(body, AssistantMessageAdded)
        for part in body.parts:
            if isinstance(part, ToolCall) and part.id == call_id:
                return item.pos, part
    return None


def _no_open_call(view: Projection | None, session: str, call_id: str) -> str:
    if view is not None:
        for item in view.items:
            body = item.event.body
            if isinstance(body, ToolResultAdded) and body.call_id == call_id and item.unit >= 0:
                return (
                    f"call {call_id!r} of session {session!r} was already answered at "
                    f"{item.event.session}#{item.event.seq}; to retry a result idempotently "
                    "pass the same key as the first time"
                )
        waiting = sorted(_open_calls(view))
    else:
        waiting = []
    return (
        f"no call {call_id!r} is waiting for a result in session {session!r} (open calls: "
        f"{waiting}); record the assistant message that makes the call first"
    )


def _recovered(view: Projection) -> bool:
    """True when a recovery (committed or failed) was recorded after the last overflow."""
    for pos in (*view.compactions, *view.failures):
        body = view.events[pos].body
        if pos > view.last_overflow and getattr(body, "reason", "") == "overflow":
            return True
    return False


def _latest_request(view: Projection, session: str) -> int | None:
    if view.last_request < 0:
        return None
    event = view.events[view.last_request]
    return event.seq if event.session == session else None


def _with_request(reply: Reply, seq: int | None) -> tuple[Body, ...]:
    if seq is None:
        return reply.bodies()
    return tuple(
        msgspec.structs.replace(body, request_seq=seq)
        if isinstance(body, (ResponseReceived, ProviderErrorReceived))
        else body
        for body in reply.bodies()
    )
