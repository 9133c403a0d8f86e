"""The registry of wire formats: one `Provider` record per provider API.

Adding a provider is one module beside this one (its renderer, its reply
parsers and its ``PROVIDER`` record) and one line below.
"""

from __future__ import annotations

from collections.abc import Mapping

from turnlog.replay import CacheRule

from . import _anthropic, _openai_chat, _openai_responses
from ._wire import Provider, RenderError

__all__ = ["CACHE_RULES", "PROVIDERS", "provider"]

#: Every wire format, by name (the name ``RequestIssued.format`` records).
PROVIDERS: Mapping[str, Provider] = {
    p.name: p for p in (_openai_chat.PROVIDER, _openai_responses.PROVIDER, _anthropic.PROVIDER)
}

#: The prompt-cache rule of each wire format, for `turnlog.Replayer.cost`.
CACHE_RULES: Mapping[str, CacheRule] = {p.name: p.caching for p in PROVIDERS.values()}


def provider(name: str) -> Provider:
    """The provider record of a wire format.

    Raises:
        RenderError: no provider has that name (the message lists the known ones).
    """
    found = PROVIDERS.get(name) if isinstance(name, str) else None
    if found is None:
        raise RenderError(f"unknown format {name!r}; expected one of {sorted(PROVIDERS)}")
    return found
