"""Provider wire formats: one record per provider API, and what works on any of them.

Each provider (``openai-chat``, ``openai-responses``, ``anthropic``) is one
`Provider` record in `PROVIDERS`: its renderer, its reply parsers, its base
URL, path and headers, and its quirks. Everything here looks a provider up by
name and never branches on it:

* rendering a packed prompt to the exact request bytes that a request record
  hashes (`render`, `renderer`, `renderer_for` to replay a record);
* parsing replies, streams and HTTP errors into the events to append
  (`parse_response`, `parse_stream`, `parse_http`, `Reply`);
* posting a request (`send` on httpx, `asend` for asyncio);
* model summarizers for compaction (`OpenAISummarizer`, `AnthropicSummarizer`).

``turnlog.adapters.providers.fakeserver`` is a local server speaking every
format, for tests and offline runs.
"""

from ._anthropic import ANTHROPIC_CACHE_LIMIT, ANTHROPIC_VERSION
from ._client import (
    DEFAULT_BASE_URLS,
    ProviderError,
    ProviderTimeoutError,
    asend,
    endpoint,
    send,
)
from ._parse import parse_http, parse_response, parse_stream
from ._registry import CACHE_RULES, PROVIDERS, provider
from ._render import (
    derived_tool_names,
    render,
    render_args,
    render_body,
    renderer,
    renderer_for,
)
from ._replies import OVERFLOW_CODES, OVERFLOW_PATTERNS, Reply, is_overflow, parse_error
from ._summarizers import AnthropicSummarizer, EmptySummaryError, OpenAISummarizer
from ._wire import (
    EMPTY_TEXT,
    FIRST_TURN_TEXT,
    MISSING_RESULT_TEXT,
    RENDER_LATEST,
    BlobReader,
    Provider,
    RenderError,
    RenderOptions,
    canonical,
)

__all__ = [
    "ANTHROPIC_CACHE_LIMIT",
    "ANTHROPIC_VERSION",
    "AnthropicSummarizer",
    "BlobReader",
    "CACHE_RULES",
    "DEFAULT_BASE_URLS",
    "EMPTY_TEXT",
    "EmptySummaryError",
    "FIRST_TURN_TEXT",
    "MISSING_RESULT_TEXT",
    "OVERFLOW_CODES",
    "OVERFLOW_PATTERNS",
    "OpenAISummarizer",
    "PROVIDERS",
    "Provider",
    "ProviderError",
    "ProviderTimeoutError",
    "RENDER_LATEST",
    "RenderError",
    "RenderOptions",
    "Reply",
    "asend",
    "canonical",
    "derived_tool_names",
    "endpoint",
    "is_overflow",
    "parse_error",
    "parse_http",
    "parse_response",
    "parse_stream",
    "provider",
    "render",
    "render_args",
    "render_body",
    "renderer",
    "renderer_for",
    "send",
]
