"""Recall: lexical (BM25) search over past conversation, committed as events.

Theory of operation
-------------------
`Recaller` indexes the text the model saw as conversation: user messages,
the text parts of assistant messages, tool results and notifications, whole:
for an output kept as a blob, the blob's full text (not the event's preview),
so a word in the middle of a large output is found and its snippet taken
from around it. A text longer than ``chunk_chars`` is indexed in chunks
(cut at a line end, or a space, in the last quarter of each chunk; the cuts
depend on the text only), each a document of its own: BM25 then scores a
passage of a large output like a small output instead of diluting it by the
output's length, and a hit says where it is (``RecallHit.offset``: the
character of the event's whole text where its snippet starts), so
``read_output`` can fetch around it. It never indexes
``CompactionCommitted`` summaries, ``RecallAdded`` results, system sections
or memories: recall must not feed on its own output or on text derived from
the conversation, or it would amplify itself (seed 002's feedback-loop fix).

Each session indexes its own events only (a fork's inherited history is
found under the session it was written in), incrementally: the index
remembers per session the last seq it has read. Events a ``SessionRewound``
took out of a session's view are not searched; the set is recomputed with
the projection's rule whenever a rewind is read, so events that a later
rewind brings back are searched again.

Ranking is Okapi BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) /
(df + 0.5))) over the searched sessions' documents, tokens being the
lowercase runs of letters and digits. Scores are quantized to 1e-6 and ties
are broken by session id, then seq, so the ranking is a pure function of the
log and the query (no dict or set order, no hash seed). With an ``embed``
function the BM25 ranking is fused with a cosine-similarity ranking by
reciprocal-rank fusion (score = sum of 1 / (60 + rank)), computed exactly.

Search results reach a prompt only through `Recaller.commit`, which appends
a ``RecallAdded`` event to the agent session. The hits it commits are capped
so that the recall message, as the packer renders it, is within
``recall_max_chars`` (4,000 by default, seed 002) and ``recall_max_tokens``:
whole hits in rank order, then the first hit that does not fit is cut at the
longest prefix that does (if a useful part of it fits), then nothing more.
The packer applies the same caps again, so an event written under another
policy is still capped.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

from ._events import (
    AssistantMessageAdded,
    Event,
    NotificationAdded,
    RecallAdded,
    RecallHit,
    SessionRewound,
    TextPart,
    ToolResultAdded,
    UserMessageAdded,
)
from ._log import Appended, Draft, Log, check_log
from ._pack._truncate import capped_recall
from ._policy import Policy
from ._projection import Projection
from ._tokens import TokenCounter, get_counter
from ._validation import check_integer, refuse_unknown_options

__all__ = ["Embedder", "Recaller"]

BM25_K1 = 1.2
BM25_B = 0.75
#: The rank offset of reciprocal-rank fusion.
RRF_K = 60
_SCALE = 1_000_000  # scores are quantized to 1e-6
_TOKEN = re.compile(r"[^\W_]+")
_CUT = " [...]"
_MIN_CUT = 40  # a cut hit shorter than this is not worth its framing

#: Maps text to a vector; must be deterministic (same text, same vector).
Embedder = Callable[[str], Sequence[float]]


def tokenize(text: str) -> list[str]:
    """The search tokens of ``text``: lowercase runs of letters and digits, in order."""
    return _TOKEN.findall(text.lower())


#: Characters of one indexed chunk of a long text.
CHUNK_CHARS = 4_000

Key = tuple[int, int]  # (seq, offset of the chunk in the event's text)


def chunks(text: str, size: int) -> list[tuple[int, str]]:
    """``text`` cut into chunks of at most ``size`` characters, as (offset, chunk):
    at the last line end (else space) in each chunk's last quarter, else at ``size``."""
    out: list[tuple[int, str]] = []
    start = 0
    while len(text) - start > size:
        end = start + size
        floor = end - size // 4
        cut = text.rfind("\n", floor, end)
        if cut < 0:
            cut = text.rfind(" ", floor, end)
        cut = cut + 1 if cut >= 0 else end
        out.append((start, text[start:cut]))
        start = cut
    out.append((start, text[start:]))
    return out


class _Doc:
    __slots__ = ("length", "offset", "seq", "text", "tf", "vector")

    def __init__(self, seq: int, text: str, tokens: list[str], offset: int = 0) -> None:
        self.seq = seq
        self.offset = offset
        self.text = text
        self.length = len(tokens)
        tf: dict[str, int] = {}
        for token in tokens:
            tf[token] = tf.get(token, 0) + 1
        self.tf = tf
        self.vector: tuple[float, ...] = ()


class _SessionIndex:
    """The documents of one session and their statistics over the searchable ones."""

    def __init__(self) -> None:
        self.last_seq = -1
        self.docs: dict[Key, _Doc] = {}
        self.order: list[Key] = []  # doc keys, ascending
        self.by_seq: dict[int, list[Key]] = {}
        self.postings: dict[str, list[Key]] = {}
        self.excluded: frozenset[int] = frozenset()
        self.df: dict[str, int] = {}
        self.count = 0
        self.total_length = 0

    def add(self, doc: _Doc) -> None:
        key = (doc.seq, doc.offset)
        self.docs[key] = doc
        self.order.append(key)
        self.by_seq.setdefault(doc.seq, []).append(key)
        for token in doc.tf:
            self.postings.setdefault(token, []).append(key)
        if doc.seq not in self.excluded:
            self._count(doc, 1)

    def _count(self, doc: _Doc, sign: int) -> None:
        self.count += sign
        self.total_length += sign * doc.length
        for token in doc.tf:
            self.df[token] = self.df.get(token, 0) + sign

    def exclude(self, seqs: frozenset[int]) -> None:
        for seq in sorted(self.excluded - seqs):
            for key in self.by_seq.get(seq, ()):
                self._count(self.docs[key], 1)
        for seq in sorted(seqs - self.excluded):
            for key in self.by_seq.get(seq, ()):
                self._count(self.docs[key], -1)
        self.excluded = seqs


def _text_of(event: Event) -> str:
    body = event.body
    if isinstance(body, UserMessageAdded):
        return body.text
    if isinstance(body, AssistantMessageAdded):
        return "\n".join(p.text for p in body.parts if isinstance(p, TextPart) and p.text)
    if isinstance(body, ToolResultAdded):
        return body.output
    if isinstance(body, NotificationAdded):
        return body.text
    return ""


class _NoCount:
    """A counter that counts nothing: the rewind projection needs no tokens."""

    @property
    def id(self) -> str:
        return "none"

    def count(self, text: str) -> int:
        del text
        return 0


def _quantize(value: float) -> int:
    return round(value * _SCALE)


def _score_text(quantized: int) -> str:
    sign = "-" if quantized < 0 else ""
    whole, frac = divmod(abs(quantized), _SCALE)
    return f"{sign}{whole}.{frac:06d}"


class Recaller:
    """Searches the conversation text of a log's sessions; commits results as events.

    Thread-safe. Keep one per log: its index is built incrementally.

    Parameters:
        log: the log.
        embed: optional deterministic text embedding; its cosine ranking is
            fused with BM25 by reciprocal-rank fusion.
        snippet_chars: the longest snippet of one hit (a window around the
            first query term when the text is longer).
        chunk_chars: texts longer than this are indexed in chunks of at most
            this many characters, each found (and ranked) on its own.
    """

    @refuse_unknown_options("Recaller()", usage="Recaller(turnlog.open(path))")
    def __init__(
        self,
        log: Log,
        *,
        embed: Embedder | None = None,
        snippet_chars: int = 800,
        chunk_chars: int = CHUNK_CHARS,
    ) -> None:
        check_log(log, "Recaller")
        check_integer(snippet_chars, "snippet_chars", min_value=16)
        check_integer(chunk_chars, "chunk_chars", min_value=256)
        self.log = log
        self.embed = embed
        self.snippet_chars = snippet_chars
        self.chunk_chars = chunk_chars
        self._index: dict[str, _SessionIndex] = {}
        self._lock = threading.RLock()
        self._erasures = log._erasures

    @property
    def searcher(self) -> str:
        """The name recorded in ``RecallAdded.searcher``."""
        return "bm25+embed:rrf" if self.embed is not None else "bm25"

    # -- indexing --------------------------------------------------------------------
    def index(self, sessions: Iterable[str] | None = None) -> int:
        """Bring the index up to date for ``sessions`` (all sessions when None).

        Returns:
            The number of documents added.
        """
        names = self._names(sessions, None)
        with self._lock:
            return sum(self._update(name) for name in names)

    def _names(self, sessions: Iterable[str] | None, exclude: str | None) -> list[str]:
        if sessions is None:
            names = [head.session for head in self.log.sessions()]
        elif isinstance(sessions, str):
            names = [sessions]
        else:
            names = list(sessions)
        return sorted({name for name in names if name != exclude})

    def _update(self, session: str) -> int:
        if self.log._erasures != self._erasures:
            # Content was erased since the index was built: it holds the old text.
            self._index.clear()
            self._erasures = self.log._erasures
        index = self._index.get(session)
        if index is None:
            index = self._index[session] = _SessionIndex()
        head = self.log.head(session)
        if head is None or head.seq <= index.last_seq:
            return 0
        added = 0
        rewound = False
        for event in self.log.read(session, index.last_seq + 1, head.seq + 1):
            if isinstance(event.body, SessionRewound):
                rewound = True
                continue
            text = _text_of(event)
            blob = getattr(event.body, "blob", None)
            if blob is not None:  # the event holds a preview: index the whole output
                text = self.log.blob(blob).decode("utf-8", "surrogatepass")
            if not text.strip():
                continue
            for offset, piece in chunks(text, self.chunk_chars):
                if not piece.strip():
                    continue
                doc = _Doc(event.seq, piece, tokenize(piece), offset)
                if self.embed is not None:
                    doc.vector = tuple(float(x) for x in self.embed(piece))
                index.add(doc)
                added += 1
        index.last_seq = head.seq
        if rewound:
            view = Projection(_NoCount())
            view.extend(self.log.lineage(session, head.seq + 1))
            index.exclude(
                frozenset(
                    view.events[pos].seq
                    for pos in view.rewound
                    if view.events[pos].session == session
                )
            )
        return added

    # -- searching -------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        sessions: Iterable[str] | None = None,
        k: int = 5,
        exclude_session: str | None = None,
    ) -> list[RecallHit]:
        """The ``k`` best hits for ``query``, best first.

        Parameters:
            query: free text.
            sessions: sessions to search (all sessions of the log when None).
            k: at most this many hits.
            exclude_session: a session never to search (e.g. the current one).

        Returns:
            `RecallHit`s with the session, seq, a snippet (at most
            ``snippet_chars`` characters), the score as a fixed-precision
            string (6 decimals: BM25, or the fused score with ``embed``) and the
            offset of the snippet in the event's whole text. A long text is
            searched in chunks, so one event may give several hits.
        """
        check_integer(k, "k", min_value=0)
        terms = list(dict.fromkeys(tokenize(query)))
        with self._lock:
            names = self._names(sessions, exclude_session)
            for name in names:
                self._update(name)
            indexes = [(name, self._index[name]) for name in names]
            ranked = self._bm25(terms, indexes)
            if self.embed is not None:
                scored = self._fuse(query, ranked, indexes)
            else:
                scored = [(key, _score_text(q)) for q, key in ranked]
            hits: list[RecallHit] = []
            for (name, seq, offset), score in scored[:k]:
                text, start = self._snippet(self._index[name].docs[(seq, offset)].text, terms)
                hits.append(
                    RecallHit(session=name, seq=seq, text=text, score=score, offset=offset + start)
                )
            return hits

    def _bm25(
        self,
        terms: list[str],
        indexes: list[tuple[str, _SessionIndex]],
    ) -> list[tuple[int, tuple[str, int, int]]]:
        """``(quantized score, (session, seq, offset))`` of every matching document,
        ranked."""
        count = sum(index.count for _, index in indexes)
        if count == 0 or not terms:
            return []
        avgdl = sum(index.total_length for _, index in indexes) / count
        idf: list[float] = []
        for term in terms:
            df = sum(index.df.get(term, 0) for _, index in indexes)
            idf.append(math.log(1.0 + (count - df + 0.5) / (df + 0.5)))
        scores: dict[tuple[str, int, int], float] = {}
        for name, index in indexes:
            for term, weight in zip(terms, idf, strict=True):
                for found in index.postings.get(term, ()):
                    if found[0] in index.excluded:
                        continue
                    doc = index.docs[found]
                    tf = doc.tf[term]
                    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * doc.length / avgdl)
                    key = (name, *found)
                    scores[key] = scores.get(key, 0.0) + weight * tf * (BM25_K1 + 1.0) / (tf + norm)
        ranked = [(_quantize(score), key) for key, score in scores.items()]
        ranked.sort(key=lambda item: (-item[0], item[1]))
        return ranked

    def _fuse(
        self,
        query: str,
        ranked: list[tuple[int, tuple[str, int, int]]],
        indexes: list[tuple[str, _SessionIndex]],
    ) -> list[tuple[tuple[str, int, int], str]]:
        assert self.embed is not None
        qvec = tuple(float(x) for x in self.embed(query))
        similar: list[tuple[int, tuple[str, int, int]]] = []
        for name, index in indexes:
            for seq, offset in index.order:
                if seq in index.excluded:
                    continue
                cos = _quantize(_cosine(qvec, index.docs[(seq, offset)].vector))
                if cos > 0:
                    similar.append((cos, (name, seq, offset)))
        similar.sort(key=lambda item: (-item[0], item[1]))
        fused: dict[tuple[str, int, int], Fraction] = {}
        for ranking in (ranked, similar):
            for rank, (_, found) in enumerate(ranking, start=1):
                fused[found] = fused.get(found, Fraction(0)) + Fraction(1, RRF_K + rank)
        order = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
        return [(key, _score_text(round(score * _SCALE))) for key, score in order]

    def _snippet(self, text: str, terms: list[str]) -> tuple[str, int]:
        """The snippet of a document around the first query term, and the offset in
        the document where its text (after any leading ``...``) starts."""
        limit = self.snippet_chars
        lead = len(text) - len(text.lstrip())
        text = text.strip()
        if len(text) <= limit:
            return text, lead
        wanted = set(terms)
        start = 0
        for match in _TOKEN.finditer(text.lower()):
            if match.group() in wanted:
                start = match.start()
                break
        # Some context before the first match, snapped to a word start.
        start = max(0, start - limit // 4)
        if start:
            space = text.rfind(" ", 0, start + 1)
            start = space + 1 if space >= 0 and start - space < 40 else start
        prefix = "..." if start else ""
        room = limit - len(prefix)
        piece = text[start : start + room]
        if start + room < len(text):
            piece = piece[: room - 3] + "..."
        return prefix + piece, lead + start

    # -- committing ------------------------------------------------------------------
    def commit(
        self,
        session: str,
        query: str,
        *,
        policy: Policy,
        sessions: Iterable[str] | None = None,
        k: int = 5,
        time: int | None = None,
    ) -> Appended | None:
        """Search and append the hits to ``session`` as a ``RecallAdded`` event.

        Parameters:
            session: the agent session whose prompts get the results.
            query: free text.
            policy: supplies ``recall_max_chars``, ``recall_max_tokens`` and
                the tokenizer the caps are counted with.
            sessions: sessions to search; when None, every session except
                ``session`` itself.
            k: at most this many hits.
            time: the event time (microseconds).

        Returns:
            Where the event landed, or None when there was no hit (or none
            fits the caps): then nothing is appended.
        """
        exclude = session if sessions is None else None
        hits = self.search(query, sessions=sessions, k=k, exclude_session=exclude)
        kept = capped_hits(query, hits, policy)
        if not kept:
            return None
        body = RecallAdded(query=query, hits=tuple(kept), searcher=self.searcher)
        return self.log.append(session, Draft(body=body, time=time))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or not a:
        return 0.0
    dot = 0.0
    na = 0.0
    nb = 0.0
    for x, y in zip(a, b, strict=True):
        dot += x * y
        na += x * x
        nb += y * y
    if na <= 0.0 or nb <= 0.0:
        return 0.0
    return dot / math.sqrt(na * nb)


def _counter(policy: Policy) -> TokenCounter:
    # A calibrated tokenizer is counted with its base here; the packer's cap,
    # which uses the calibrated count, still applies at pack time.
    return get_counter(policy.tokenizer.removeprefix("calibrated:"))


def capped_hits(query: str, hits: Sequence[RecallHit], policy: Policy) -> list[RecallHit]:
    """The hits (in order) that fit ``recall_max_chars`` and ``recall_max_tokens``.

    "Fits" means the packer's recall cap leaves the recall message as it is.
    Whole hits are kept in order; the first one that does not fit is cut to
    the longest prefix that does (when at least a few words of it fit); the
    rest are left out.

    Parameters:
        query: the query the hits answer (it is part of the message).
        hits: ranked hits.
        policy: supplies the caps and the tokenizer.

    Returns:
        The hits to commit (possibly none).
    """
    counter = _counter(policy)

    def fits(candidate: list[RecallHit]) -> bool:
        body = RecallAdded(query=query, hits=tuple(candidate))
        return capped_recall(body, policy, counter)[1] == ""

    kept: list[RecallHit] = []
    for hit in hits:
        if fits([*kept, hit]):
            kept.append(hit)
            continue
        low, high = 0, len(hit.text)  # longest prefix length that fits, by bisection
        while low < high:
            mid = (low + high + 1) // 2
            if fits([*kept, _cut(hit, mid)]):
                low = mid
            else:
                high = mid - 1
        if low >= _MIN_CUT:
            kept.append(_cut(hit, low))
        break
    return kept


def _cut(hit: RecallHit, length: int) -> RecallHit:
    return RecallHit(
        session=hit.session, seq=hit.seq, text=hit.text[:length].rstrip() + _CUT, score=hit.score
    )
