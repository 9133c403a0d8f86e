"""Requests as records: record a request, replay it, check it, explain it, diff two.

Theory of operation
-------------------
A `Replayer` does the work on recorded requests, apart from the `Packer` that
packs the live sessions (as a workflow's replayer stands apart from the worker
that runs it), and borrows the packer's caches: its token counts (loaded from
the store once), its projections and policies in force, its pipeline.

Recording a request (`Replayer.record`) makes sure the policy used is the one
in force in the log (appending a ``PolicySet`` when it is not), packs, and
appends a ``RequestIssued`` event that names the log head it packed
(seq and hash), the policy hash, the tokenizer id and the prompt hash, with
``expected_seq`` set to that head: if anything was appended in between, the
record is refused and the pack is redone, so a record always describes
exactly the prompt that is returned.

`replay` rebuilds the projection from the lineage up to the recorded head,
packs with the recorded policy and tokenizer, and compares prompt hashes.
The projection it folded is kept (a few, least recently used dropped first)
with its packing index, so a later request of the same session only folds
the events in between: `replay_all` checks a session's requests in order
and folds its lineage once. The log never changes an event, so a projection
of the lineage up to a seq stays the projection of that prefix; a request
whose head lies before the kept fold is projected afresh. Packing a grown
projection with its kept index gives the bytes a fresh pack gives (the
incremental engine's contract, which `record` relies on too).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping

import blake3
import msgspec

from ._cost import BREAKPOINT_CACHE, CacheRule, CostedRequest, SessionCost, cost_of
from ._errors import (
    AppendConflictError,
    IdempotencyError,
    InvalidArgumentError,
    ReplayMismatchError,
    StoreError,
    TokenizerError,
    UnknownSessionError,
)
from ._events import Event, EventErased, PolicySet, RequestIssued, ResponseReceived, Usage
from ._log import DEFAULT_ATTEMPTS, Draft, Head, Log, Snapshot
from ._pack import Decision, Packed, PackIndex
from ._pack._engine import pack_stored
from ._packer import Packer, policy_at
from ._policy import Policy, check_policy
from ._projection import Projection
from ._prompt import Prompt
from ._store import ReadAheadMiss
from ._tokens import TokenCounter, get_counter
from ._validation import check_type, refuse_unknown_options

__all__ = ["DecisionChange", "Recorded", "Renderer", "ReplayResult", "Replayer", "RequestDiff"]

#: Replay projections kept per replayer (one per session and tokenizer).
_REPLAY_VIEWS = 4


#: Renders a neutral prompt to a provider request body (bytes); must be pure.
Renderer = Callable[[Prompt], bytes]


class Recorded(msgspec.Struct, frozen=True):
    """A recorded request: the packed prompt, the seq of its record, and the
    rendered request body when a renderer was given; ``duplicate`` when the
    record's key was stored already and this is the stored request."""

    packed: Packed
    request_seq: int
    rendered: bytes = b""
    duplicate: bool = False


class ReplayResult(msgspec.Struct, frozen=True):
    """The outcome of replaying one request."""

    session: str
    request_seq: int
    ok: bool
    recorded_hash: str
    replayed_hash: str
    difference: str = ""
    #: When the request cannot be reproduced because content it held was erased:
    #: the seq of the (first) erasure event that erased it (``ok`` is False and
    #: ``difference`` says so). None otherwise.
    erased_by: int | None = None


class DecisionChange(msgspec.Struct, frozen=True):
    """An event whose packing decision differs between two requests."""

    pos: int
    seq: int
    kind: str
    before: str
    after: str
    rule: str
    detail: str


class RequestDiff(msgspec.Struct, frozen=True):
    """How two requests of a session differ.

    Attributes:
        shared_messages: messages the second prompt shares, in order, from
            the start of the first (same system and tools required).
        shared_tokens: tokens of that shared prefix (system and tools included):
            what a provider prompt cache can reuse.
        tokens_a / tokens_b: the two prompts' totals.
        system_changed / tools_changed: whether those differ.
        changes: events whose decision changed, with the new rule.
    """

    request_a: int
    request_b: int
    shared_messages: int
    shared_tokens: int
    tokens_a: int
    tokens_b: int
    system_changed: bool
    tools_changed: bool
    changes: tuple[DecisionChange, ...]


class _ReplayView:
    """A projection of a session's lineage up to own seq ``seq``, for replay."""

    __slots__ = ("index", "last_hash", "policy", "seq", "view")

    def __init__(self, view: Projection, seq: int, policy: Policy | None) -> None:
        self.view = view
        self.seq = seq
        self.policy = policy  # of the last PolicySet folded (rewound or not), as replay reads it
        self.index = PackIndex()
        self.last_hash = b""  # of the event at ``seq``

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.view.apply(event)
            if isinstance(event.body, PolicySet):
                self.policy = event.body.policy
            self.seq = event.seq
            self.last_hash = event.hash


class Replayer:
    """Records requests of a log's sessions and replays, checks, explains and diffs
    them.

    Thread-safe. Keep one per packer: it keeps the projections its replays fold.

    Parameters:
        packer: the packer whose log, pipeline and caches it uses; a request is
            replayed with the pipeline it was packed with, so a request packed
            with custom stages needs a packer with the same stages.
    """

    @refuse_unknown_options("Replayer()", usage="Replayer(Packer(turnlog.open(path)))")
    def __init__(self, packer: Packer) -> None:
        check_type(packer, Packer, "packer", what="a Packer (a Replayer borrows its caches)")
        self.packer = packer
        self.log: Log = packer.log
        self._replays: OrderedDict[tuple[str, str], _ReplayView] = OrderedDict()
        # Replays have their own lock: a long replay does not hold up packing.
        self._replay_lock = threading.Lock()
        self._erasures = self.log._erasures

    def record(
        self,
        session: str,
        *,
        policy: Policy | None = None,
        model: str = "",
        time: int | None = None,
        format: str = "neutral",  # noqa: A002
        render: Renderer | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        key: str | None = None,
        render_args: str = "",
    ) -> Recorded:
        """Pack the session and append the ``RequestIssued`` record, atomically
        with respect to the log head (see the module docstring).

        Parameters:
            policy: the policy, resolved (`Policy.resolved`) and appended as
                ``PolicySet`` when not in force (not when the prompt cannot be packed
                or rendered under it); the one in force when None.
            model: the model the request goes to (recorded).
            time: caller-supplied time of the record.
            format: the name of ``render`` (recorded; replay needs the same one).
            render: a pure function from the neutral prompt to the request body;
                its bytes are hashed into the record and returned.
            render_args: the parameters ``render`` was built with besides format and
                model, as a string its adapter can read back (recorded, so replay can
                build the same renderer again).
            attempts: tries (`Log.update`) when other writers keep moving the head.
            key: idempotency key of the ``RequestIssued`` event. A key already stored
                is a retry (after a crash or a lost answer): the stored request comes
                back, re-packed and re-rendered (``duplicate=True``), and nothing is
                appended.

        Raises:
            IdempotencyError: ``key`` is stored for an event that is not a request.
            ReplayMismatchError: the stored request does not re-render to its
                recorded hash with ``render``.
            AppendConflictError: the head kept moving for ``attempts`` tries, or
                another writer put a different policy in force while recording
                (nothing of the request was written).
        """
        packer = self.packer
        check_policy(policy)
        if self.log.head(session) is None:
            raise UnknownSessionError(f"no session {session!r} to pack")
        stored = self.log.find_key(session, key) if key is not None else None
        if stored is not None:
            return self._stored(session, stored, render)

        def in_force(use: Policy) -> bool:
            found = packer._policy_event(session)
            return found is not None and found.hash == use.hash

        def decide_policy(head: Head | None) -> Draft | None:
            with packer._lock:
                use = packer._policy_to_use(session, policy)
                return None if in_force(use) else Draft(body=PolicySet(policy=use), time=time)

        with packer._lock:
            if policy is not None and not in_force(policy.resolved()):
                # A prompt that cannot be packed (or rendered) under a new policy must
                # not leave that policy in force: try it before its PolicySet is written.
                trial = packer.pack(session, policy=policy)
                if render is not None:
                    render(trial.prompt)
        self.log.update(session, decide_policy, attempts=attempts)
        made: list[tuple[Packed, bytes]] = []

        def decide(head: Head | None) -> Draft:
            # Packed after ``head`` was read: if another writer appends while we pack,
            # the prompt may hold events past it, and the append then conflicts (and
            # we re-pack) instead of recording a head that does not match the prompt.
            assert head is not None
            with packer._lock:
                use = packer._policy_to_use(session, policy)
                if not in_force(use):
                    raise AppendConflictError(
                        f"another writer put a different policy in force in session "
                        f"{session!r} while this request was being recorded; nothing of it "
                        "was written. Record again (with the policy that should win)",
                        session=session,
                        expected=head.seq,
                        actual=head.seq,
                    )
                # `use` is in force: pack with the policy in force, as recorded
                packed = packer.pack(session)
                rendered = render(packed.prompt) if render is not None else b""
                made[:] = [(packed, rendered)]
                return Draft(
                    body=RequestIssued(
                        head_seq=head.seq,
                        head_hash=head.hash.hex(),
                        policy_hash=use.hash,
                        tokenizer=packed.tokenizer,
                        prompt_hash=packed.prompt.hash,
                        tokens=packed.tokens,
                        format=format,
                        model=model,
                        recovery=packed.recovery,
                        stages=packer._names,
                        calibration=packed.tokenizer.partition("*")[2],
                        digests=packed.prompt.part_digests(),
                        rendered_hash=blake3.blake3(rendered).hexdigest() if render else "",
                        render_args=render_args if render is not None else "",
                    ),
                    time=time,
                    key=key,
                )

        done = self.log.update(session, decide, attempts=attempts)
        assert done is not None
        # The request is recorded: a failure to save the token counts must not tell the
        # caller it was not (a retry would record it twice); the counts are derived data
        # that a later pack counts, and saves, again.
        with contextlib.suppress(StoreError):
            packer.flush()
        packed, rendered = made[0]
        return Recorded(packed, done.last_seq, rendered)

    def _stored(self, session: str, seq: int, render: Renderer | None) -> Recorded:
        """The request a retried `record` stored at ``seq``, re-packed and re-rendered."""
        body = self.log.get(session, seq).body
        if not isinstance(body, RequestIssued):
            raise IdempotencyError(
                f"the key of this record is stored at {session}#{seq}, a "
                f"{type(body).__name__} event; use a new key for a request"
            )
        packed = self.repack(session, seq)
        rendered = render(packed.prompt) if render is not None else b""
        if render is not None and blake3.blake3(rendered).hexdigest() != body.rendered_hash:
            raise ReplayMismatchError(
                f"the request stored under this key ({session}#{seq}) "
                "does not re-render to its recorded hash; was it "
                "recorded with another renderer?"
            )
        return Recorded(packed, seq, rendered, duplicate=True)

    # -- replay and explain --------------------------------------------------------------
    def _request(
        self,
        session: str,
        request_seq: int,
        snap: Snapshot | None = None,
    ) -> RequestIssued:
        event = (snap or self.log).get(session, request_seq)
        if isinstance(event.body, EventErased) and event.body.kind == "request":
            raise InvalidArgumentError(
                f"{session}#{request_seq} was a request record, erased (erasure event "
                f"#{event.body.by}): what it recorded is gone, so it cannot be replayed "
                f"or explained; list the requests left with `turnlog log {session} "
                f"--kind request` (Python: `Replayer.requests({session!r})`)"
            )
        if not isinstance(event.body, RequestIssued):
            raise InvalidArgumentError(
                f"{session}#{request_seq} is not a request record (its kind is "
                f"{event.kind!r}); list requests with `turnlog log "
                f"{session} --kind request` (Python: "
                f"`Replayer.requests({session!r})`)"
            )
        return event.body

    def repack(self, session: str, request_seq: int) -> Packed:
        """Re-pack a recorded request from its recorded head, policy and tokenizer."""
        return self._repack(session, request_seq, explain=True)

    def _repack(self, session: str, request_seq: int, *, explain: bool) -> Packed:
        return self._repack_under(session, request_seq, explain=explain)[0]

    def _repack_under(
        self,
        session: str,
        request_seq: int,
        *,
        explain: bool,
        found: list[RequestIssued] | None = None,
    ) -> tuple[Packed, Policy]:
        """The re-packed request and the policy it was packed under (the request
        record is appended to ``found``). The request, its head and the events the
        kept view lacks are read in one snapshot. Which events those are is known only
        from the request (its head), so the snapshot reads ahead: the session's events
        from the kept view's end up to the request; on PostgreSQL that is one round trip
        (`Store.read_ahead`). A replay that needs anything else (a fork's source, an
        older head than the kept view's, more than a page) reads again, in a snapshot of
        its own."""
        with self._replay_lock:
            found = [] if found is None else found
            had = len(found)
            try:
                with self.log._read_ahead(
                    session, request_seq, self._kept_end(session, request_seq)
                ) as snap:
                    request, state = self._replay_read(snap, session, request_seq, found)
            except ReadAheadMiss:
                del found[had:]
                with self.log.snapshot() as snap:
                    request, state = self._replay_read(snap, session, request_seq, found)
            policy = state.policy
            if policy is None or policy.hash != request.policy_hash:
                raise ReplayMismatchError(self._policy_differs(session, request))
            try:
                return pack_stored(
                    state.view,
                    policy,
                    stages=self.packer.stages,
                    explain=explain,
                    index=state.index,
                ), policy
            except BaseException:
                # A pack that fails part-way may leave the index half caught up.
                self._replays.pop((session, state.view.counter.id), None)
                raise

    def _replay_read(
        self, snap: Snapshot, session: str, request_seq: int, found: list[RequestIssued]
    ) -> tuple[RequestIssued, _ReplayView]:
        request = self._request(session, request_seq, snap)
        found.append(request)
        return request, self._replay_state(snap, session, request_seq, request)

    def _kept_end(self, session: str, request_seq: int) -> int:
        """Where the events a replay of ``session``'s ``request_seq`` lacks start: past
        the shortest view kept for the session that ends before the request (0: none)."""
        ends = [
            state.seq + 1
            for (kept, _), state in self._replays.items()
            if kept == session and state.seq < request_seq
        ]
        return min(ends, default=0)

    def _replay_state(
        self, snap: Snapshot, session: str, request_seq: int, request: RequestIssued
    ) -> _ReplayView:
        """The checked replay view of a request (the caller holds the replay lock)."""
        if request.stages != self.packer._names:
            raise ReplayMismatchError(
                f"request {session}#{request_seq} was packed with stages "
                f"{request.stages or '(built-in)'!r}; this packer has "
                f"{self.packer._names or '(built-in)'!r}. Replay with the same custom stages"
            )
        try:
            counter = get_counter(request.tokenizer)
        except TokenizerError:
            # The head check, then the policy check come first, as they always have.
            self._check_head(snap.get(session, request.head_seq).hash, session, request)
            policy = policy_at(snap.lineage(session, request.head_seq + 1))
            if policy is None or policy.hash != request.policy_hash:
                raise ReplayMismatchError(self._policy_differs(session, request)) from None
            raise
        self.packer._load_counts(counter)  # once per tokenizer
        state = self._replay_view(session, request.head_seq, counter, snap)
        # The view ends with the head event (read with it, not on its own).
        if state.seq != request.head_seq:
            snap.get(session, request.head_seq)  # raises: no such event
        try:
            self._check_head(state.last_hash, session, request)
        except ReplayMismatchError:
            self._replays.pop((session, counter.id), None)
            raise
        return state

    @staticmethod
    def _check_head(found: bytes, session: str, request: RequestIssued) -> None:
        if found.hex() != request.head_hash:
            raise ReplayMismatchError(
                f"the log's event {session}#{request.head_seq} no longer "
                "has the recorded hash; run `turnlog verify` (Python: "
                "`Log.verify()`)"
            )

    @staticmethod
    def _policy_differs(session: str, request: RequestIssued) -> str:
        return (
            f"the policy in force at {session}#{request.head_seq} is not the recorded "
            f"one ({request.policy_hash[:16]})"
        )

    def _replay_view(
        self, session: str, head_seq: int, counter: TokenCounter, snap: Snapshot | None = None
    ) -> _ReplayView:
        """The lineage up to own seq ``head_seq`` folded with ``counter`` (the kept
        projection grown when it ends at or before ``head_seq``, else a fresh one)."""
        if self.log._erasures != self._erasures:
            # Content was erased since these views were folded: they hold its text.
            self._replays.clear()
            self._erasures = self.log._erasures
        key = (session, counter.id)
        state = self._replays.get(key)
        if state is not None and state.seq <= head_seq:
            self._replays.move_to_end(key)
            if state.seq < head_seq:
                state.extend((snap or self.log).read(session, state.seq + 1, head_seq + 1))
            if state.seq == head_seq:
                return state
        lineage = (snap or self.log).lineage(session, head_seq + 1)
        view = Projection(counter)
        state = _ReplayView(view, -1, None)
        for event in lineage:
            view.apply(event)
            if isinstance(event.body, PolicySet):
                state.policy = event.body.policy
        state.seq = lineage[-1].seq if lineage else -1
        state.last_hash = lineage[-1].hash if lineage else b""
        self._replays[key] = state
        self._replays.move_to_end(key)
        while len(self._replays) > _REPLAY_VIEWS:
            self._replays.popitem(last=False)
        return state

    def replay(
        self, session: str, request_seq: int, *, render: Renderer | None = None
    ) -> ReplayResult:
        """Re-pack a recorded request and compare it with the record.

        Parameters:
            render: the renderer named by the record's ``format``; when the
                record holds a rendered hash, the re-rendered body must match
                it too (without a renderer only the neutral prompt is checked).

        Returns a `ReplayResult`; ``ok`` is False with ``difference`` naming
        the first differing part when the bytes differ.
        """
        found: list[RequestIssued] = []
        try:
            packed = self._repack_under(session, request_seq, explain=False, found=found)[0]
        except ReplayMismatchError as exc:
            if not found:
                raise
            return ReplayResult(session, request_seq, False, found[0].prompt_hash, "", str(exc))
        request = found[0]
        replayed = packed.prompt.hash  # encodes the whole prompt: once
        ok = replayed == request.prompt_hash
        difference = ""
        if not ok:
            by = self._erased_by(session, request.head_seq)
            if by is not None:
                return ReplayResult(
                    session,
                    request_seq,
                    False,
                    request.prompt_hash,
                    replayed,
                    f"content it included was erased by {by[0]}#{by[1]}",
                    erased_by=by[1],
                )
            difference = _first_difference(request.digests, packed)
        elif request.rendered_hash and render is not None:
            rendered = blake3.blake3(render(packed.prompt)).hexdigest()
            if rendered != request.rendered_hash:
                ok = False
                difference = (
                    f"the neutral prompt matches but the {request.format} rendering "
                    f"differs ({rendered[:16]} vs {request.rendered_hash[:16]})"
                )
        return ReplayResult(session, request_seq, ok, request.prompt_hash, replayed, difference)

    def _erased_by(self, session: str, head_seq: int) -> tuple[str, int] | None:
        """The first erasure (session, seq) that erased an event of the lineage up to
        ``head_seq``, or None when none did: a request that does not re-pack to its
        record and whose lineage holds erased events is reported as erased there."""
        found: tuple[str, int] | None = None
        for event in self.log.lineage(session, head_seq + 1):
            body = event.body
            if isinstance(body, EventErased) and (found is None or body.by < found[1]):
                found = (event.session, body.by)
        return found

    def replay_all(
        self,
        session: str,
        request_seqs: Iterable[int] | None = None,
        *,
        render: Callable[[RequestIssued], Renderer | None] | None = None,
    ) -> Iterator[ReplayResult]:
        """Replay a session's recorded requests, folding its lineage once.

        Each result is the one `replay` gives for that request; requests in
        ascending order (the default) cost one fold of the lineage plus one
        incremental pack each.

        Parameters:
            request_seqs: the requests to replay, in this order (every request
                record of the session, oldest first, when None).
            render: gives the renderer for a request record (its ``format`` and
                ``render_args`` name it), or None to check the neutral prompt only.

        Raises:
            UnknownSessionError: no such session or seq.
            InvalidArgumentError: a seq that is not a request record.
        """
        seqs = self.requests(session) if request_seqs is None else list(request_seqs)
        for seq in seqs:
            renderer = render(self._request(session, seq)) if render is not None else None
            yield self.replay(session, seq, render=renderer)

    def check(self, session: str, request_seq: int) -> Packed:
        """Like `replay`, but raise `ReplayMismatchError` on a mismatch."""
        result = self.replay(session, request_seq)
        if not result.ok:
            raise ReplayMismatchError(
                f"replay of {session}#{request_seq} differs: {result.difference}"
            )
        return self.repack(session, request_seq)

    def requests(self, session: str) -> list[int]:
        """Seqs of the session's request records."""
        return [e.seq for e in self.log.read(session, kinds=["request"])]

    def cost(
        self,
        session: str,
        *,
        caching: Mapping[str, CacheRule] | None = None,
        default: CacheRule = BREAKPOINT_CACHE,
    ) -> SessionCost:
        """What the session's recorded requests cost: input, cache-write and cache-read
        tokens and their price, each request re-packed and read by its format's cache
        rule, beside the usage the provider reported (see ``turnlog.replay.cost_of``).

        Parameters:
            caching: the cache rule of each wire format (``RequestIssued.format``);
                the adapters' providers declare theirs
                (``turnlog.adapters.providers.CACHE_RULES``).
            default: the rule of a format ``caching`` does not name (``neutral``
                records among them): Anthropic's breakpoints, which the neutral
                prompt's breakpoints follow.

        Returns:
            A `SessionCost`, one row per request record in log order. A request
            that does not re-pack to its record (erased content, a changed store)
            has a ``note`` saying why and no estimate.

        Raises:
            UnknownSessionError: no such session.
        """
        check_type(default, CacheRule, "default", what="a CacheRule")
        rules = dict(caching or {})
        for name, rule in rules.items():
            check_type(rule, CacheRule, f"caching[{name!r}]", what="a CacheRule")
        if self.log.head(session) is None:
            raise UnknownSessionError(
                f"no session {session!r} in this log; list sessions "
                "with `turnlog sessions` (Python: `Log.sessions()`)"
            )
        reported: dict[int, Usage] = {}
        for event in self.log.read(session, kinds=["response"]):
            body = event.body
            if isinstance(body, ResponseReceived) and body.request_seq is not None:
                reported[body.request_seq] = body.usage  # the last reply to a request wins
        items: list[CostedRequest] = []
        for event in self.log.read(session, kinds=["request"]):
            request = event.body
            assert isinstance(request, RequestIssued)
            rule = rules.get(request.format, default)
            packed: Packed | None = None
            policy: Policy | None = None
            note = ""
            try:
                packed, policy = self._repack_under(session, event.seq, explain=False)
            except (ReplayMismatchError, TokenizerError) as exc:
                note = f"cannot be re-packed: {exc}"
            if packed is not None and packed.prompt.hash != request.prompt_hash:
                by = self._erased_by(session, request.head_seq)
                note = (
                    f"content it included was erased by {by[0]}#{by[1]}"
                    if by is not None
                    else "does not replay to its record; run `turnlog replay "
                    f"{session} {event.seq}`"
                )
                packed = None
            items.append(
                CostedRequest(
                    request_seq=event.seq,
                    format=request.format,
                    model=request.model,
                    packed=packed,
                    policy=policy,
                    rule=rule,
                    reported=reported.get(event.seq),
                    note=note,
                )
            )
        return cost_of(session, items)

    def explain(self, session: str, request_seq: int) -> Packed:
        """The packed request with its per-event decisions and stage reports."""
        return self.repack(session, request_seq)

    def diff(self, session: str, request_a: int, request_b: int) -> RequestDiff:
        """Compare two recorded requests (shared prefix, changed decisions)."""
        a = self.repack(session, request_a)
        b = self.repack(session, request_b)
        system_changed = a.prompt.system != b.prompt.system
        tools_changed = a.prompt.tools != b.prompt.tools
        shared = 0
        shared_tokens = 0
        if not system_changed and not tools_changed:
            shared_tokens = sum(a.section_tokens) + a.budget.tools
            for ma, mb, ta in zip(
                a.prompt.messages, b.prompt.messages, a.message_tokens, strict=False
            ):
                if ma != mb:
                    break
                shared += 1
                shared_tokens += ta
        changes = tuple(_changes(a.decisions, b.decisions))
        return RequestDiff(
            request_a,
            request_b,
            shared,
            shared_tokens,
            a.tokens,
            b.tokens,
            system_changed,
            tools_changed,
            changes,
        )


def _first_difference(recorded: bytes, packed: Packed) -> str:
    replayed = packed.prompt.part_digests()
    for i in range(0, max(len(recorded), len(replayed)), 8):
        if recorded[i : i + 8] != replayed[i : i + 8]:
            return f"first difference at {packed.prompt.describe_part(i // 8)}"
    return "the parts match but the breakpoints differ"


def _changes(a: tuple[Decision, ...], b: tuple[Decision, ...]) -> list[DecisionChange]:
    out = []
    for da, db in zip(a, b, strict=False):
        if da.decision != db.decision:
            out.append(
                DecisionChange(
                    pos=db.pos,
                    seq=db.seq,
                    kind=db.kind,
                    before=da.decision,
                    after=db.decision,
                    rule=db.rule,
                    detail=db.detail,
                )
            )
    return out


# -- the 0.2.0 spelling ------------------------------------------------------------------
#: The methods `Packer` had in 0.2.0 that are the `Replayer`'s now. They still resolve on a
#: `Packer` until 0.4.0, with a `DeprecationWarning` naming the new spelling, and
#: forward to one `Replayer` kept per packer (so a replay keeps its folded projections).
_MOVED_TO_REPLAYER = (
    "check",
    "diff",
    "explain",
    "record",
    "repack",
    "replay",
    "replay_all",
    "requests",
)


def _replayer_of(packer: Packer) -> Replayer:
    with packer._lock:
        found = packer.__dict__.get("_deprecated_replayer")
        if not isinstance(found, Replayer):
            found = Replayer(packer)
            packer.__dict__["_deprecated_replayer"] = found
        return found


def _forwarder(name: str) -> Callable[..., object]:
    method = getattr(Replayer, name)

    def forward(self: Packer, *args: object, **kwargs: object) -> object:
        warnings.warn(
            f"Packer.{name} has moved: use turnlog.Replayer(packer).{name}(...) "
            f"(from turnlog import Replayer); Packer.{name} goes in the next "
            "release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_replayer_of(self), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = f"Deprecated: use `Replayer.{name}` (``Replayer(packer).{name}``).\n\n" + (
        method.__doc__ or ""
    )
    return forward


# Set on the class here, where `Replayer` is defined: `_packer` cannot import `_replay`
# (which imports it) without an import cycle in the kernel. Type checkers see only the
# new spelling.
for _name in _MOVED_TO_REPLAYER:
    setattr(Packer, _name, _forwarder(_name))
del _name
