"""OpenTelemetry spans (``turnlog[otel]``): `span` opens one through
``opentelemetry-api`` when it is installed, and does nothing otherwise."""

from __future__ import annotations

from ._otel import set_attributes, span

__all__ = ["set_attributes", "span"]
