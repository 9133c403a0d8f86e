"""Model summarizers for compaction: OpenAI-compatible and Anthropic endpoints.

Theory of operation
-------------------
Both implement the kernel's ``Summarizer`` protocol. Each renders, through
its provider's record, a prompt whose system section is the request's
``instructions()`` and whose one user message is its ``source_text()`` (the
transcript, or the child summaries of a roll-up), with the output cap set to
the request's ``max_tokens``, and sends it to a *summary model* that is
usually cheaper than the agent's main model (the policy's ``summary_model``).
The answer's text is the summary; its provenance is ``summarizer``
(``openai:MODEL`` / ``anthropic:MODEL``), ``model`` and the request's
``prompt_hash()``.

Each has a ``window``: the tokens the summary model reads at once (the model
table's context window for a known model, `DEFAULT_WINDOW` otherwise, or what
the caller passes). The compactor gives it every covered output whole and cuts a
span whose transcript is larger than that into parts, summarized one request at
a time and then merged (see ``turnlog.compaction``); the requests are the same
shape, so nothing here changes for a part or a merge.

They raise on every failure: `ProviderError` for an HTTP error (with the
parsed ``ProviderErrorReceived``, ``overflow`` included),
`ProviderTimeoutError` when the endpoint is too slow,
``turnlog.errors.DecodeError`` for an answer that is not the provider's shape,
`EmptySummaryError` for an answer without text. The compactor records any
of these as ``CompactionFailed`` and its circuit breaker counts them.
Requests go through `send` (httpx); a summarizer given an ``httpx.Client``
keeps its connections open from one summary to the next.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from turnlog.compaction import Summary, SummaryRequest
from turnlog.errors import InvalidArgumentError
from turnlog.events import ProviderErrorReceived, TextPart
from turnlog.packing import Message, ModelTable, Prompt, Section
from turnlog.validation import check_integer, check_number, check_text

from ._client import DEFAULT_BASE_URLS, ProviderError, send
from ._registry import provider
from ._replies import Reply
from ._wire import RenderOptions, canonical

__all__ = ["AnthropicSummarizer", "EmptySummaryError", "OpenAISummarizer"]

#: The window assumed for a summary model the model table does not know.
DEFAULT_WINDOW = 32_000


class EmptySummaryError(ProviderError):
    """The model answered without any text."""


def _text_of(reply: Reply, summarizer: str) -> str:
    if reply.error is not None:
        error = reply.error
        kind = "context overflow" if error.overflow else (error.error_type or error.code or "error")
        raise ProviderError(
            f"summarizer {summarizer}: HTTP {error.status} {kind}: {error.message[:300]}",
            error=error,
        )
    parts = reply.message.parts if reply.message is not None else ()
    text = "".join(p.text for p in parts if isinstance(p, TextPart)).strip()
    if not text:
        stop = reply.response.stop_reason if reply.response is not None else ""
        raise EmptySummaryError(
            f"summarizer {summarizer}: the model returned no text (stop reason {stop!r})",
            error=ProviderErrorReceived(
                error_type="empty_summary", message=f"no text (stop reason {stop!r})"
            ),
        )
    return text


def _check(model: str, timeout: float, window: int | None) -> int:
    """Validate the common arguments; the window to use."""
    check_text(model, "model")
    check_number(timeout, "timeout", min_value=0, exclusive_min=True, hint="a number of seconds")
    check_integer(
        window,
        "window",
        min_value=1024,
        optional=True,
        hint="tokens the summary model reads at once",
    )
    if window is not None:
        return window
    info = ModelTable.shipped().lookup(model)
    return info.context_window if info is not None else DEFAULT_WINDOW


def _body(
    format: str,  # noqa: A002
    model: str,
    request: SummaryRequest,
    temperature: float | None,
) -> dict[str, object]:
    """The request body of a summary call, rendered by the provider's own renderer."""
    prompt = Prompt(
        system=(Section(name="instructions", text=request.instructions()),),
        tools=(),
        messages=(Message(role="user", parts=(TextPart(text=request.source_text()),)),),
    )
    body = provider(format).build(prompt, RenderOptions(model, max(1, request.max_tokens), None))
    if temperature is not None:
        body["temperature"] = temperature
    return body


class _ModelSummarizer:
    """What both model summarizers share: one call to the provider of ``_FORMAT``."""

    _FORMAT: str
    model: str
    base_url: str
    timeout: float
    _api_key: str
    _headers: dict[str, str]
    _client: httpx.Client | None

    @property
    def id(self) -> str:
        raise NotImplementedError

    def body(self, request: SummaryRequest) -> bytes:
        raise NotImplementedError

    def summarize(self, request: SummaryRequest) -> Summary:
        """Summarize ``request`` with the summary model.

        Raises:
            ProviderError: an HTTP error (``error.overflow`` for a context overflow)
                or no text in the answer.
            ProviderTimeoutError: no answer within the timeout.
            DecodeError: an answer that is not a body of the provider's API (Chat
                Completions, Messages).
        """
        reply = send(
            self._FORMAT,
            self.body(request),
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            headers=self._headers,
            client=self._client,
        )
        return Summary(
            text=_text_of(reply, self.id),
            summarizer=self.id,
            model=self.model,
            prompt_hash=request.prompt_hash(),
        )


class OpenAISummarizer(_ModelSummarizer):
    """Summarizes with an OpenAI-compatible Chat Completions endpoint.

    Works with OpenAI and with compatible servers (DeepSeek, Groq, Ollama, vLLM...).

    Parameters:
        model: the summary model (e.g. ``gpt-4o-mini``, ``deepseek-chat``).
        api_key: sent as ``Authorization: Bearer``.
        base_url: the API root including the version (``https://api.openai.com/v1``).
        timeout: seconds to connect and for each read.
        temperature: sent when not None (the default: reasoning models refuse any
            other than their own).
        max_tokens_field: ``max_tokens`` (compatible servers) or
            ``max_completion_tokens`` (OpenAI reasoning models).
        headers: further HTTP headers.
        client: an ``httpx.Client`` to send through (its connections kept between
            summaries; the caller closes it); a client per call when None.
        window: tokens the model reads at once (None: the model table's context
            window, `DEFAULT_WINDOW` for a model it does not know).

    Raises:
        InvalidArgumentError: an empty model, a non-positive timeout or a window
            below 1,024 tokens.
    """

    _FORMAT = "openai-chat"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URLS["openai-chat"],
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens_field: str = "max_tokens",
        headers: Mapping[str, str] | None = None,
        client: httpx.Client | None = None,
        window: int | None = None,
    ) -> None:
        self.window = _check(model, timeout, window)
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise InvalidArgumentError(
                "max_tokens_field must be 'max_tokens' or "
                f"'max_completion_tokens', found {max_tokens_field!r}"
            )
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens_field = max_tokens_field
        self._api_key = api_key
        self._headers = dict(headers or {})
        self._client = client

    @property
    def id(self) -> str:
        """``openai:MODEL``."""
        return f"openai:{self.model}"

    def body(self, request: SummaryRequest) -> bytes:
        """The request body sent for ``request`` (canonical JSON bytes)."""
        payload = _body("openai-chat", self.model, request, self.temperature)
        # Compatible servers name the cap max_tokens; the renderer writes OpenAI's name.
        payload[self.max_tokens_field] = payload.pop("max_completion_tokens")
        return canonical(payload)


class AnthropicSummarizer(_ModelSummarizer):
    """Summarizes with the Anthropic Messages API.

    Parameters:
        model: the summary model (e.g. ``claude-haiku-4-5``).
        api_key: sent as ``x-api-key``.
        base_url: the API root without the version (``https://api.anthropic.com``).
        timeout: seconds to connect and for each read.
        temperature: sent when not None (the default: recent models refuse it).
        headers: further HTTP headers.
        client: an ``httpx.Client`` to send through (its connections kept between
            summaries; the caller closes it); a client per call when None.
        window: tokens the model reads at once (None: the model table's context
            window, `DEFAULT_WINDOW` for a model it does not know).

    Raises:
        InvalidArgumentError: an empty model, a non-positive timeout or a window
            below 1,024 tokens.
    """

    _FORMAT = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URLS["anthropic"],
        timeout: float = 60.0,
        temperature: float | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.Client | None = None,
        window: int | None = None,
    ) -> None:
        self.window = _check(model, timeout, window)
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.temperature = temperature
        self._api_key = api_key
        self._headers = dict(headers or {})
        self._client = client

    @property
    def id(self) -> str:
        """``anthropic:MODEL``."""
        return f"anthropic:{self.model}"

    def body(self, request: SummaryRequest) -> bytes:
        """The request body sent for ``request`` (canonical JSON bytes)."""
        return canonical(_body("anthropic", self.model, request, self.temperature))
