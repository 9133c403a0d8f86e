"""OpenTelemetry spans, when ``opentelemetry-api`` is installed (``turnlog[otel]``).

Nothing to call: turnlog asks the global tracer provider for a tracer named
``turnlog``; without an SDK configured the API's spans are no-ops, and without the
package `span` yields None and costs nothing. Spans are opened around the shell
(the `Packer`, the `Compactor`, the `MemoryManager`, the session facade), never
inside the pure packing core, and carry only data already in the log (hashes,
seqs, token counts), so tracing changes no recorded byte.

Attributes follow the OpenTelemetry GenAI semantic conventions
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``) plus
``turnlog.session``, ``turnlog.request_seq``, ``turnlog.prompt_hash`` and
``turnlog.policy_hash``, which name the replayable request a trace belongs to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

try:  # optional: the kernel runs without it
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised where the extra is not installed
    _trace = None  # type: ignore[assignment]

__all__ = ["set_attributes", "span"]

Attributes = Mapping[str, str | int | float | bool]


@contextlib.contextmanager
def span(name: str, attributes: Attributes | None = None) -> Iterator[Any]:
    """A span named ``name`` (None when opentelemetry-api is not installed)."""
    if _trace is None:
        yield None
        return
    tracer = _trace.get_tracer("turnlog")
    with tracer.start_as_current_span(name, attributes=dict(attributes or {})) as current:
        yield current


def set_attributes(current: Any, attributes: Attributes) -> None:
    """Add attributes to a span from `span` (nothing when it is None)."""
    if current is not None:
        current.set_attributes(dict(attributes))
