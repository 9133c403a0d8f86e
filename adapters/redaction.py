"""Redaction at the door: secrets replaced by placeholders before they are appended.

Theory of operation
-------------------
The log keeps everything for ever, and erasing afterwards (`Log.erase`) leaves the
erased event's hash behind; a secret that never reaches the log needs neither. A
`Redactor` scans the text of an event before it is appended and replaces every
secret it finds by ``[redacted: KIND]``, where KIND names the detector that found
it (``AWS Access Key``, ``Private Key``...); the event's meta records how many of
each kind were replaced (``meta["turnlog:redacted"] = {"AWS Access Key": 1}``),
never the secret and never a digest of it: a digest of a short or patterned secret
confirms a guess (hash each candidate and compare), which is what the placeholder
is there to prevent.

The detectors are the regular-expression plugins of detect-secrets (a dependency,
held at 1.5.x), named in `DETECTORS` so that a newer detect-secrets
adds none on its own, plus `EXTRA_PATTERNS` for what it has no plugin for (a
bearer token in an ``Authorization`` header), plus the caller's own patterns
(``patterns={"employee id": r"EMP-[0-9]{6}"}``). A pattern with groups redacts
what its first group matched (the secret in its context: the password of a
``scheme://user:password@host`` URL), one without the whole match. A
private key is redacted from its ``-----BEGIN`` line to its ``-----END`` line
(to the end of the text when it has none), a JSON Web Token to the end of its
signature. Overlapping findings merge into one placeholder, named by the one
that starts first (the longer on a tie, then the first in detector order).

Deterministic: the same text gives the same redacted text and the same counts
(the detectors are regular expressions, applied in a fixed order), so an
import redacted twice appends the same events and the second one nothing.

What is scanned: every text an event holds for a model or a person to read
(message and reasoning text, tool-call arguments, tool output, notifications,
system sections, memories, recall queries and hits, summaries, error messages,
saved state, image URLs other than ``data:``), and every string value in its
meta; never ids, names, hashes or opaque provider payloads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
from turnlog import Draft
from turnlog.errors import Hint, KernelError
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    CompactionCommitted,
    CompactionFailed,
    ImagePart,
    MemoryChanged,
    NotificationAdded,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RecallHit,
    StateSaved,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.validation import check_type

__all__ = ["ALL_DETECTORS", "DETECTORS", "EXTRA_PATTERNS", "META_KEY", "RedactionError", "Redactor"]

#: The detect-secrets plugins a `Redactor` runs (class names in
#: ``detect_secrets.plugins``), in this order. Left out: the entropy and keyword
#: heuristics (they flag hashes, ids and code, not only secrets), public IP
#: addresses (not secrets), and the keyword-in-context plugins of IBM Cloud IAM,
#: IBM COS HMAC, Cloudant and SoftLayer, which took two thirds of the scan time
#: (docs/benchmarks.md); name them in ``detectors=`` to run them too.
DETECTORS: tuple[str, ...] = (
    "PrivateKeyDetector",
    "AWSKeyDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "ArtifactoryDetector",
    "DiscordBotTokenDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "JwtTokenDetector",
    "MailchimpDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "SquareOAuthDetector",
    "StripeDetector",
    "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)
#: Every plugin a caller may name in ``detectors=``.
ALL_DETECTORS: tuple[str, ...] = (
    *DETECTORS,
    "CloudantDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "SoftlayerDetector",
)

#: Kinds detect-secrets has no plugin for: a bearer token (``Authorization:
#: Bearer ...``, ``"token_type": "bearer"`` aside), redacted after the plugins.
EXTRA_PATTERNS: tuple[tuple[str, str], ...] = (
    ("Bearer Token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"),
)

#: The meta key under which an event records what was redacted from it.
META_KEY = "turnlog:redacted"

_PLACEHOLDER = "[redacted: {kind}]"
# A key's body up to its end line (headers such as ``Proc-Type: 4,ENCRYPTED``, base64
# lines, newlines as themselves or as JSON's ``\n``), and without an end line (a key
# cut off) the rest of its first line and the base64 lines that follow.
_KEY_TO_END = re.compile(
    r"(?:[A-Za-z0-9+/=:,.\s-]|\\[nr]){0,65536}?"
    r"(?:-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|"
    r"Private-MAC: *[0-9a-fA-F]*)"
)
_KEY_CUT = re.compile(r"[A-Z ]*-{0,5}(?:(?:\r?\n|\\r?\\n)[ \t]*[A-Za-z0-9+/=]{16,})*")
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_.+/=-]*")

# Which fields of which payloads and parts hold text to scan; tuples of parts are
# walked, strings scanned.
_FIELDS: dict[type, tuple[str, ...]] = {
    UserMessageAdded: ("text", "images"),
    AssistantMessageAdded: ("parts",),
    TextPart: ("text",),
    ReasoningPart: ("text",),
    ToolCall: ("arguments",),
    ImagePart: ("url",),
    ToolResultAdded: ("output",),
    NotificationAdded: ("text",),
    SystemSectionSet: ("text",),
    MemoryChanged: ("title", "content"),
    RecallAdded: ("query", "hits"),
    RecallHit: ("text",),
    CompactionCommitted: ("summary",),
    CompactionFailed: ("error",),
    ProviderErrorReceived: ("message",),
    StateSaved: ("data",),
}


class RedactionError(KernelError):
    """Redaction cannot run: detect-secrets is not installed, or a detector or
    pattern given is not one (a bad regular expression, an unknown plugin)."""


def _key_block(text: str, start: int, end: int) -> tuple[int, int]:
    """A private key from its ``-----BEGIN`` to its ``-----END ...-----`` line (or,
    cut off, to its last base64 line)."""
    dashes = text.rfind("-----", max(0, start - 8), start)
    if dashes >= 0:
        start = dashes
    found = _KEY_TO_END.match(text, end) or _KEY_CUT.match(text, end)
    return start, found.end() if found is not None else end


def _token_tail(text: str, start: int, end: int) -> tuple[int, int]:
    """A token to its last character (the plugin's pattern stops before a JWT's
    signature)."""
    found = _TOKEN_TAIL.match(text, end)
    return start, found.end() if found is not None else end


# Kinds whose pattern's first group is a prefix of the token, not the secret in
# its context: the whole match is redacted.
_WHOLE_MATCH = frozenset({"GitHub Token", "GitLab Token"})

# How far a finding of a kind reaches past what its pattern matched.
_EXTEND: dict[str, Callable[[str, int, int], tuple[int, int]]] = {
    "Private Key": _key_block,
    "JSON Web Token": _token_tail,
}


def _plugins(names: Sequence[str]) -> list[tuple[str, list[re.Pattern[str]]]]:
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ImportError:
        raise RedactionError(
            "redaction needs the detect-secrets package, which is not installed",
            hint=Hint(
                cli="pip install 'turnlog[redact]', or pass --no-redact to import "
                "without redaction",
                python="pip install 'turnlog[redact]', or pass redactor=None",
            ),
        ) from None
    plugins: Iterable[Any] = get_mapping_from_secret_type_to_class().values()
    by_name: dict[str, Any] = {plugin.__name__: plugin for plugin in plugins}
    found = []
    for name in names:
        cls = by_name.get(name)
        denylist = getattr(cls, "denylist", None) if cls is not None else None
        if cls is None or denylist is None:
            raise RedactionError(
                f"detector {name!r} is not a regular-expression plugin of "
                f"detect-secrets; known: {', '.join(ALL_DETECTORS)}"
            )
        # Some plugins declare their patterns as a property: read them off an instance.
        patterns = list(cls().denylist if isinstance(denylist, property) else denylist)
        found.append((str(cls.secret_type), patterns))
    return found


class Redactor:
    """Replaces secrets in events by ``[redacted: KIND]`` placeholders (module doc).

    Parameters:
        patterns: the caller's own kinds: a name (the placeholder's KIND) to a
            regular expression; what its first group matched is redacted, or the
            whole match when it has no group. Applied after the detectors.
        detectors: the detect-secrets plugins to run (class names); `DETECTORS`
            when None.

    Raises:
        RedactionError: detect-secrets is not installed, a detector is unknown, or
            a pattern is not a valid regular expression.
    """

    def __init__(
        self, *, patterns: Mapping[str, str] | None = None, detectors: Sequence[str] | None = None
    ) -> None:
        kinds = _plugins(DETECTORS if detectors is None else tuple(detectors))
        for kind, source in (*EXTRA_PATTERNS, *sorted((patterns or {}).items())):
            if not isinstance(kind, str) or not kind or "]" in kind:
                raise RedactionError(
                    f"a pattern's kind must be a non-empty name without ']', found {kind!r}"
                )
            try:
                kinds.append((kind, [re.compile(source)]))
            except (re.error, TypeError) as exc:
                raise RedactionError(
                    f"pattern {kind!r} is not a valid regular expression ({exc}): {source!r}"
                ) from None
        self._kinds = kinds

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds it redacts, in the order it looks for them."""
        return tuple(kind for kind, _ in self._kinds)

    def _findings(self, text: str) -> list[tuple[int, int, int, str]]:
        found: list[tuple[int, int, int, str]] = []
        for order, (kind, regexes) in enumerate(self._kinds):
            extend = _EXTEND.get(kind)
            for regex in regexes:
                group = 1 if regex.groups and kind not in _WHOLE_MATCH else 0
                for match in regex.finditer(text):
                    start, end = match.span(group if match.group(group) else 0)
                    if end <= start:
                        continue
                    if extend is not None:
                        start, end = extend(text, start, end)
                    found.append((start, -end, order, kind))
        found.sort()
        return found

    def text(self, text: str) -> tuple[str, dict[str, int]]:
        """The text with every secret replaced, and how many of each kind were."""
        if not text:
            return text, {}
        spans: list[list[Any]] = []  # [start, end, kind], merged
        for start, negative_end, _, kind in self._findings(text):
            if spans and start < spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], -negative_end)
            else:
                spans.append([start, -negative_end, kind])
        if not spans:
            return text, {}
        out: list[str] = []
        counts: dict[str, int] = {}
        done = 0
        for start, end, kind in spans:
            out.append(text[done:start])
            out.append(_PLACEHOLDER.format(kind=kind))
            counts[kind] = counts.get(kind, 0) + 1
            done = end
        out.append(text[done:])
        return "".join(out), counts

    def body(self, body: Body) -> tuple[Body, dict[str, int]]:
        """The payload with the secrets in its texts replaced, and the counts."""
        counts: dict[str, int] = {}
        return self._struct(body, counts), counts

    def _struct(self, value: Any, counts: dict[str, int]) -> Any:
        fields = _FIELDS.get(type(value))
        if fields is None:
            return value
        changes: dict[str, Any] = {}
        for name in fields:
            old = getattr(value, name)
            new: object
            if isinstance(old, str):
                if name == "url" and old.startswith("data:"):
                    continue
                new, found = self.text(old)
                _add(counts, found)
            else:
                new = tuple(self._struct(item, counts) for item in old)
            if new != old:
                changes[name] = new
        return msgspec.structs.replace(value, **changes) if changes else value

    def meta(self, meta: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
        """A meta mapping with the secrets in its string values replaced (keys and
        the redaction record itself are kept), and the counts."""
        counts: dict[str, int] = {}
        out = {
            key: value if key == META_KEY else self._value(value, counts)
            for key, value in meta.items()
        }
        return out, counts

    def _value(self, value: Any, counts: dict[str, int]) -> Any:
        if isinstance(value, str):
            new, found = self.text(value)
            _add(counts, found)
            return new
        if isinstance(value, Mapping):
            return {key: self._value(item, counts) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._value(item, counts) for item in value)
        return value

    def draft(self, draft: Draft | Body) -> Draft:
        """The draft (or payload) redacted, with what was redacted added to its meta
        under `META_KEY` (a draft with nothing to redact comes back unchanged)."""
        if not isinstance(draft, Draft):
            draft = Draft(body=draft)
        body, counts = self.body(draft.body)
        meta, in_meta = self.meta(draft.meta)
        _add(counts, in_meta)
        if not counts:
            return draft
        record = dict(draft.meta.get(META_KEY) or {})
        _add(record, counts)
        meta[META_KEY] = dict(sorted(record.items()))
        return msgspec.structs.replace(draft, body=body, meta=meta)

    def drafts(self, drafts: Iterable[Draft | Body]) -> list[Draft]:
        """`draft` of each."""
        return [self.draft(d) for d in drafts]


def _add(counts: dict[str, int], more: Mapping[str, int]) -> None:
    for kind, n in more.items():
        if n:
            counts[kind] = counts.get(kind, 0) + n


def check_redactor(value: object) -> Redactor | None:
    """``value`` when it is a `Redactor` or None (`InvalidArgumentError` otherwise)."""
    check_type(value, (Redactor, type(None)), "redactor", what="a Redactor or None")
    return value  # type: ignore[return-value]
