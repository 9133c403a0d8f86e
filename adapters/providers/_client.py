"""A minimal HTTP client for the three wire formats (stdlib ``urllib`` only).

Theory of operation
-------------------
`send` posts a rendered request body (the exact bytes a request record
hashes) to a provider endpoint and parses the answer with ``responses``: a
JSON body or, when the server answers ``text/event-stream``, an SSE stream
read to its end. An HTTP error status is not an exception here: it comes
back as a `Reply` whose ``error`` is set, ready to append as
``ProviderErrorReceived``. Only failures that produce no answer raise:
`ProviderTimeoutError` when the server is too slow, `ProviderError` when it
cannot be reached, and ``turnlog.errors.DecodeError`` for a 2xx answer that does not
parse.

Base URLs follow the official SDKs: an OpenAI base URL includes the version
(``https://api.openai.com/v1``), an Anthropic one does not
(``https://api.anthropic.com``); the provider's path is appended. Headers
(authentication, API version) come from the provider record.
"""

from __future__ import annotations

import asyncio
import http.client
import urllib.error
import urllib.request
from collections.abc import Mapping

from turnlog import KernelError
from turnlog.events import ProviderErrorReceived

from ._anthropic import ANTHROPIC_VERSION
from ._parse import parse_http
from ._registry import PROVIDERS, provider
from ._replies import Reply

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_BASE_URLS",
    "ProviderError",
    "ProviderTimeoutError",
    "asend",
    "endpoint",
    "send",
]

#: The public endpoints, used when no base URL is given (each provider's ``base_url``).
DEFAULT_BASE_URLS: Mapping[str, str] = {name: p.base_url for name, p in PROVIDERS.items()}


class ProviderError(KernelError):
    """A provider call failed.

    Attributes:
        error: the failure as the event to append (status None when no HTTP
            answer came back).
    """

    def __init__(self, message: str, *, error: ProviderErrorReceived) -> None:
        super().__init__(message)
        self.error = error


class ProviderTimeoutError(ProviderError, TimeoutError):
    """The provider did not answer within the timeout."""


def endpoint(format: str, base_url: str | None = None) -> str:  # noqa: A002
    """The URL a ``format`` request is posted to.

    Raises:
        RenderError: unknown format.
    """
    return provider(format).endpoint(base_url)


def send(format: str, body: bytes, *, api_key: str, base_url: str | None = None,  # noqa: A002
         timeout: float = 120.0, headers: Mapping[str, str] | None = None,
         request_seq: int | None = None) -> Reply:
    """POST a rendered request body and parse the answer.

    Parameters:
        format: ``openai-chat``, ``openai-responses`` or ``anthropic``.
        body: the request body (e.g. ``Recorded.rendered``).
        api_key: sent as ``Authorization: Bearer`` (OpenAI) or ``x-api-key`` (Anthropic).
        base_url: the API root (see the module docstring); the public one when None.
        timeout: seconds to connect and for each read.
        headers: further headers.
        request_seq: the seq of the ``RequestIssued`` record (put into the events).

    Returns:
        The parsed `Reply`; for an HTTP error status its ``error`` is set.

    Raises:
        ProviderTimeoutError: no answer within ``timeout``.
        ProviderError: the server cannot be reached.
        DecodeError: a successful answer that does not parse.
    """
    spec = provider(format)
    url = spec.endpoint(base_url)
    all_headers = {"content-type": "application/json", "accept": "application/json",
                   **spec.headers(api_key), **(headers or {})}
    request = urllib.request.Request(url, data=body, headers=all_headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status = answer.status
            content_type = answer.headers.get("content-type", "")
            data = answer.read()
    except urllib.error.HTTPError as exc:
        status = exc.code
        content_type = exc.headers.get("content-type", "") if exc.headers else ""
        try:
            data = exc.read()
        except (OSError, TimeoutError):
            data = b""
        finally:
            exc.close()
    except TimeoutError as exc:
        raise _timeout(url, timeout, request_seq) from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _timeout(url, timeout, request_seq) from exc
        raise _unreachable(url, exc.reason, request_seq) from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:  # reset, bad URL, cut
        raise _unreachable(url, exc, request_seq) from exc
    stream = "text/event-stream" in content_type.lower()
    return parse_http(format, status, data, stream=stream if status < 400 else False,
                      request_seq=request_seq)


async def asend(format: str, body: bytes, *, api_key: str,  # noqa: A002
                base_url: str | None = None, timeout: float = 120.0,
                headers: Mapping[str, str] | None = None,
                request_seq: int | None = None) -> Reply:
    """`send` for asyncio: the same request, answer and errors, without blocking the
    event loop (the blocking client runs in a worker thread)."""
    return await asyncio.to_thread(send, format, body, api_key=api_key, base_url=base_url,
                                   timeout=timeout, headers=headers, request_seq=request_seq)


def _timeout(url: str, timeout: float, request_seq: int | None) -> ProviderTimeoutError:
    message = f"no answer from {url} within {timeout} s"
    return ProviderTimeoutError(message, error=ProviderErrorReceived(
        request_seq=request_seq, error_type="timeout", message=message))


def _unreachable(url: str, reason: object, request_seq: int | None) -> ProviderError:
    message = f"cannot reach {url}: {reason}"
    return ProviderError(message, error=ProviderErrorReceived(
        request_seq=request_seq, error_type="connection", message=message))
