"""The packer: packs the sessions of a log, the I/O shell around the pure `pack`.

Theory of operation
-------------------
A `Packer` keeps one `Projection` per session and tokenizer and feeds it only
the events appended since its last use, so re-packing a long session costs
O(new events); each projection keeps its incremental packing index. Token
counts are persisted in the store's derived cache (`Packer.flush`), so a new
process does not re-tokenize history either. Both caches are bounded.

The packer reads the log and calls the pure `pack`; it records nothing. Work on
recorded requests (record, replay, check, explain, diff) is the `Replayer`'s
(``_replay``), which borrows these caches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from ._errors import (
    UnknownSessionError,
)
from ._events import ContentErased, Event, PolicySet
from ._log import Log, check_log
from ._otel import set_attributes as otel_attributes
from ._otel import span as otel_span
from ._pack._engine import Stage, check_stages, pack_stored
from ._pack._index import PackIndex
from ._pack._model import Packed
from ._policy import Policy, check_policy
from ._projection import Projection
from ._store import WriteTxn
from ._tokens import (
    CACHE_NAMESPACE,
    CalibratedCounter,
    TiktokenCounter,
    TokenCounter,
    calibration_ratio,
    chunk_key,
    get_counter,
    index_key,
    index_value,
    open_chunk,
    open_index,
    seal_chunk,
)
from ._validation import check_integer, refuse_unknown_options

__all__ = ["Packer"]

_CACHE_NS = CACHE_NAMESPACE


class Packer:
    """Packs sessions of a log, records requests, replays them.

    Thread-safe. Keep one per log and reuse it: it caches projections.

    Parameters:
        log: the log.
        stages: a custom pipeline (None for the built-in one). Its stage names
            are recorded with each request.
        cached_sessions: how many session projections to keep up to date in
            memory (least recently packed dropped first). A session packed
            again after it was dropped is projected afresh from the log, which
            gives the same prompt; memory is bounded by this many sessions.
    """

    @refuse_unknown_options("Packer()", usage="Packer(turnlog.open(path))")
    def __init__(
        self,
        log: Log,
        *,
        stages: Sequence[tuple[str, Stage]] | None = None,
        cached_sessions: int = 64,
    ) -> None:
        check_log(log, "Packer")
        check_stages(stages)
        check_integer(cached_sessions, "cached_sessions", min_value=1)
        self.log = log
        self.stages = tuple(stages) if stages is not None else None
        self._names = "" if stages is None else ",".join(name for name, _ in stages)
        self._cached_sessions = cached_sessions
        self._projections: OrderedDict[tuple[str, str], tuple[Projection, int, PackIndex]] = (
            OrderedDict()
        )
        self._lock = threading.RLock()
        self._loaded: set[str] = set()
        # Per counter id: where the next chunk of counts goes, and the chunks found
        # damaged when loading (rewritten first).
        self._next_chunk: dict[str, int] = {}
        self._damaged_chunks: dict[str, list[int]] = {}
        self._erasures = log._erasures

    # -- counters -----------------------------------------------------------------
    def counter_for(self, policy: Policy, view: Projection | None = None) -> TokenCounter:
        """The counter a policy asks for (``calibrated:BASE`` learns its ratio from
        the usage recorded in ``view``)."""
        spec = policy.tokenizer
        if spec.startswith("calibrated:"):
            base = get_counter(spec.removeprefix("calibrated:"))
            ratio = calibration_ratio(view.usage) if view is not None else None
            counter: TokenCounter = base if ratio is None else CalibratedCounter(base, ratio)
        else:
            counter = get_counter(spec)
        self._load_counts(counter)
        return counter

    def _load_counts(self, counter: TokenCounter) -> None:
        base = counter._base if isinstance(counter, CalibratedCounter) else counter
        if not isinstance(base, TiktokenCounter) or base.id in self._loaded:
            return
        self._loaded.add(base.id)
        # Chunks are dense from 0: read until the first missing one. A chunk whose
        # digest does not match is not loaded (its texts get counted again).
        damaged: list[int] = []
        index = 0
        with self.log.snapshot() as snap:
            while (value := snap.cached(_CACHE_NS, chunk_key(base.id, index))) is not None:
                data = open_chunk(base.id, index, value)
                if data is None:
                    damaged.append(index)
                else:
                    base.load(data)
                index += 1
        with self._lock:
            self._next_chunk[base.id] = index
            self._damaged_chunks[base.id] = damaged

    def flush(self) -> None:
        """Persist token counts computed since the last flush (derived data).

        Each save is one chunk, sealed with a digest; it replaces a chunk found
        damaged when loading, or goes after the last one.
        """
        if self.log.store.readonly:
            return
        for name in sorted(self._loaded):
            counter = get_counter(name)
            if not isinstance(counter, TiktokenCounter):
                continue
            data = counter.export_new()
            if not data:
                continue
            with self._lock:
                damaged = tuple(self._damaged_chunks.get(name, ()))
                start = self._next_chunk.get(name, 0)

            def write(
                txn: WriteTxn,
                data: bytes = data,
                name: str = name,
                damaged: tuple[int, ...] = damaged,
                start: int = start,
            ) -> int:
                # The new counts replace the first chunk still damaged (the others are
                # emptied: their texts are counted again as they are used), or go
                # after the last chunk (another process may have added some).
                bad = [
                    i
                    for i in damaged
                    if open_chunk(name, i, txn.cached(_CACHE_NS, chunk_key(name, i)) or b"") is None
                ]
                for i in bad[1:]:
                    txn.put_cached(_CACHE_NS, chunk_key(name, i), seal_chunk(name, i, b""))
                index = start if not bad else bad[0]
                while not bad and txn.cached(_CACHE_NS, chunk_key(name, index)) is not None:
                    index += 1
                txn.put_cached(_CACHE_NS, chunk_key(name, index), seal_chunk(name, index, data))
                ids = open_index(txn.cached(_CACHE_NS, index_key()))
                if ids is None or name not in ids:
                    txn.put_cached(_CACHE_NS, index_key(), index_value({*(ids or ()), name}))
                return index

            index = self.log.store.write(write)
            with self._lock:
                if damaged:
                    self._damaged_chunks[name] = []
                else:
                    self._next_chunk[name] = max(self._next_chunk.get(name, 0), index + 1)

    # -- projections --------------------------------------------------------------
    def projection(self, session: str, counter: TokenCounter) -> Projection:
        """The session's projection at its current head (built or brought up to date)."""
        with self._lock:
            self._forget_erased()
            key = (session, counter.id)
            cached = self._projections.get(key)
            if cached is None:
                # One snapshot for the lineage and the head: read apart, another
                # writer's events could land between them and never be applied.
                with self.log.snapshot() as snap:
                    own_head = snap.head(session)
                    if own_head is None:
                        raise UnknownSessionError(f"no session {session!r}")
                    lineage = snap.lineage(session)
                view = Projection(counter)
                view.extend(lineage)
                self._projections[key] = (view, own_head.seq, PackIndex())
                while len(self._projections) > self._cached_sessions:
                    self._projections.popitem(last=False)
                return view
            self._projections.move_to_end(key)
            view, seen, index = cached
            new = self.log.read(session, seen + 1)
            if any(type(event.body) is ContentErased for event in new):
                # Erased by another process: the view holds the old text.
                del self._projections[key]
                return self.projection(session, counter)
            if new:
                view.extend(new)
                self._projections[key] = (view, new[-1].seq, index)
            return view

    def _forget_erased(self) -> None:
        """Drop every projection (and its index) when this process erased content
        since they were built: they hold the text of the events as first read, and a
        fork's view holds its parent's events too."""
        if self.log._erasures != self._erasures:
            self._projections.clear()
            self._erasures = self.log._erasures

    def index_of(self, view: Projection) -> PackIndex | None:
        """The incremental index the packer keeps for one of its projections (None for
        a projection it does not hold); pass it to `pack` to pack that projection
        incrementally."""
        with self._lock:
            for cached, _, index in self._projections.values():
                if cached is view:
                    return index
        return None

    def pack_view(self, view: Projection, policy: Policy, *, explain: bool = True) -> Packed:
        """`pack` one of the packer's projections with its pipeline and index (the
        policy as given: resolve a caller's policy first, see `Policy.resolved`)."""
        with otel_span("turnlog.pack") as current:
            packed = pack_stored(
                view, policy, stages=self.stages, explain=explain, index=self.index_of(view)
            )
            otel_attributes(
                current,
                {
                    "turnlog.policy_hash": packed.policy_hash,
                    "turnlog.prompt_hash": packed.prompt.hash,
                    "gen_ai.usage.input_tokens": packed.tokens,
                    "turnlog.stages_fired": ",".join(s.name for s in packed.stages if s.fired),
                },
            )
            return packed

    def projection_at(self, session: str, head_seq: int, counter: TokenCounter) -> Projection:
        """A fresh projection of the lineage up to and including ``head_seq``."""
        view = Projection(counter)
        view.extend(self.log.lineage(session, head_seq + 1))
        return view

    def policy_in_force(self, session: str) -> Policy | None:
        """The policy of the session's last ``PolicySet`` (None when it has none)."""
        with self._lock:
            return self._policy_event(session)

    def _policy_event(self, session: str) -> Policy | None:
        """The policy of the last ``PolicySet`` in the session's lineage, if any."""
        view = self._any_projection(session)
        if view is not None:
            return view.policy
        return policy_at(self.log.lineage(session))

    def _any_projection(self, session: str) -> Projection | None:
        for (name, _), (view, _, _) in list(self._projections.items()):
            if name == session:
                return self.projection(session, view.counter)  # brought up to date
        return None

    # -- packing ------------------------------------------------------------------
    def pack(self, session: str, *, policy: Policy | None = None, explain: bool = True) -> Packed:
        """Pack the session's current history (nothing is recorded).

        Parameters:
            policy: the policy to use (resolved: rules unset means the newest);
                the one in force in the log when None (as recorded), the
                resolved defaults when the log has none.
        """
        with self._lock:
            return self._pack_as_given(
                session, self._policy_to_use(session, policy), explain=explain
            )

    def _pack_as_given(self, session: str, policy: Policy, *, explain: bool = True) -> Packed:
        counter = self.counter_for(policy, self._base_view(session, policy))
        view = self.projection(session, counter)
        return self.pack_view(view, policy, explain=explain)

    def _policy_to_use(self, session: str, policy: Policy | None) -> Policy:
        """The caller's policy resolved, else the one in force as recorded, else the
        resolved defaults."""
        check_policy(policy)
        if policy is not None:
            return policy.resolved()
        return self._policy_event(session) or Policy().resolved()

    def _base_view(self, session: str, policy: Policy) -> Projection | None:
        if not policy.tokenizer.startswith("calibrated:"):
            return None
        return self.projection(session, get_counter(policy.tokenizer.removeprefix("calibrated:")))


def policy_at(lineage: list[Event]) -> Policy | None:
    """The policy of the last ``PolicySet`` in ``lineage`` (None when it has none)."""
    for event in reversed(lineage):
        if isinstance(event.body, PolicySet):
            return event.body.policy
    return None
