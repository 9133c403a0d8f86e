"""LangGraph on a turnlog log: a checkpointer and model hooks (``turnlog[langgraph]``).

Theory of operation
-------------------
`TurnlogSaver` is a LangGraph ``BaseCheckpointSaver`` over any turnlog store
(LMDB, memory, PostgreSQL). A thread is a turnlog session (``prefix + thread_id``),
the same session the model hooks below write the conversation to, so one hash
chain holds what the graph saved and what the model was sent. Each saver call
appends ``StateSaved`` events, which packing never reads:

=======================  ===================================================
``langgraph.checkpoint``  one per ``put``: ``data`` names the namespace, the
                          checkpoint id, its parent and, per channel, the
                          version and which blob holds the value; ``blobs``
                          are the checkpoint without its values, its
                          metadata, then the values of the channels this put
                          changed (``new_versions``). A value is stored once
                          per content (blobs are content-addressed): the
                          other channels are read from the checkpoint that
                          wrote their version.
``langgraph.writes``      one per ``put_writes``: the task, its path, and per
                          write its index, channel and value blob.
``langgraph.hidden``      checkpoints that ``delete_for_runs`` or ``prune``
                          took out of view.
=======================  ===================================================

Blobs hold the bytes of the saver's serializer (``serde.dumps_typed``), their
media type ``application/vnd.langgraph.TYPE`` names its type tag; so a value
LangGraph can serialize is kept byte for byte and read back by the same
serializer, and one it cannot is refused by it, naming the type, before
anything is written. The blobs of an event are written before the event (one
write transaction), so a crash in between leaves at most unreferenced blobs.

Reads fold a thread's ``state`` and ``rewind`` events in log order into an
index (kept per session and extended with the events appended since), with
LangGraph's rules: a checkpoint put again replaces the earlier one; a write of
a regular channel that its task already wrote at that index is ignored, one of
a special channel (errors, interrupts) replaces it. Appends need no
precondition (the fold decides what they mean), so concurrent writers never
conflict.

Nothing is ever deleted from a log. ``delete_thread`` appends
``SessionRewound(to_seq=-1)``: every earlier event of the thread (checkpoints,
writes and the conversation) leaves the view, stays in the log, still verifies
and replays; the thread starts afresh. Once turnlog can erase content (an
erasure event that destroys blobs and leaves the chain verifiable),
``delete_thread`` will also erase the thread's blobs. ``delete_for_runs`` and
``prune`` hide checkpoints the same way (``langgraph.hidden``); ``copy_thread``
appends the source's state events still in its view to the target session,
sharing their blobs.

The async methods run the same code in a worker thread
(``asyncio.to_thread``), so an LMDB or PostgreSQL call never blocks the event
loop.

`TurnlogModelHooks` puts turnlog in the request path of a prebuilt agent
(``create_react_agent(..., pre_model_hook=hooks.pre_model,
post_model_hook=hooks.post_model)``). Before every model call ``pre_model``
appends the messages of the graph state that the session does not hold yet
(by message id, through `TurnlogChatMessageHistory`), packs the session under
its policy, records the request (``RequestIssued``, format ``neutral``) and
hands the packed prompt to the model as ``llm_input_messages``: nothing reaches
the model that was not appended first, and ``turnlog replay`` reproduces every
call. ``post_model`` appends the model's reply with its usage as the response
to that request.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import blake3
from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from turnlog import Draft, Log, Packer, Policy
from turnlog.errors import InvalidArgumentError, StoreCorruptError, UnknownSessionError
from turnlog.events import BlobRef, SessionRewound, StateSaved
from turnlog.packing import ModelTable
from turnlog.validation import check_type

from .langchain import META_KEY, TurnlogChatMessageHistory

__all__ = [
    "TurnlogModelHooks",
    "TurnlogSaver",
]

_MEDIA = "application/vnd.langgraph."
_CHECKPOINT = "langgraph.checkpoint"
_WRITES = "langgraph.writes"
_HIDDEN = "langgraph.hidden"
_SOURCES = frozenset({_CHECKPOINT, _WRITES, _HIDDEN})


class _Saved:
    """One checkpoint as the fold knows it (its values stay in blobs until read)."""

    __slots__ = ("checkpoint", "id", "metadata", "ns", "parent", "seq", "values")

    def __init__(
        self,
        seq: int,
        ns: str,
        ident: str,
        parent: str | None,
        checkpoint: BlobRef,
        metadata: BlobRef,
        values: dict[str, BlobRef | None],
    ) -> None:
        self.seq = seq
        self.ns = ns
        self.id = ident
        self.parent = parent
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.values = values


class _Thread:
    """The fold of one session's state events up to ``next_seq``."""

    def __init__(self) -> None:
        self.next_seq = 0
        self.checkpoints: dict[tuple[str, str], _Saved] = {}
        #: (ns, checkpoint id) -> (task id, index) -> (seq, channel, value blob, task path)
        self.writes: dict[
            tuple[str, str], dict[tuple[str, int], tuple[int, str, BlobRef, str]]
        ] = {}
        #: (ns, channel, version as JSON) -> the blob holding that version's value
        self.versions: dict[tuple[str, str, str], BlobRef | None] = {}

    def fold(self, seq: int, body: object) -> None:
        if isinstance(body, SessionRewound):
            keep = body.to_seq
            if keep < 0:  # a version written before the rewind is gone with it
                self.versions.clear()
            self.checkpoints = {k: c for k, c in self.checkpoints.items() if c.seq <= keep}
            self.writes = {
                k: {t: w for t, w in ws.items() if w[0] <= keep} for k, ws in self.writes.items()
            }
            return
        if not isinstance(body, StateSaved) or body.source not in _SOURCES:
            return
        data = json.loads(body.data)
        if body.source == _CHECKPOINT:
            ns, ident = data["ns"], data["id"]
            values: dict[str, BlobRef | None] = {}
            for channel, (version, index) in data["channels"].items():
                ref = body.blobs[index] if index is not None else None
                self.versions[(ns, channel, json.dumps(version))] = ref
            for channel, version in data["versions"].items():
                values[channel] = self.versions.get((ns, channel, json.dumps(version)))
            self.checkpoints[(ns, ident)] = _Saved(
                seq, ns, ident, data["parent"], body.blobs[0], body.blobs[1], values
            )
        elif body.source == _WRITES:
            outer = self.writes.setdefault((data["ns"], data["id"]), {})
            for index, channel, blob in data["writes"]:
                inner = (data["task"], index)
                if index >= 0 and inner in outer:
                    continue
                outer[inner] = (seq, channel, body.blobs[blob], data["path"])
        elif body.source == _HIDDEN:
            for ns, ident in data["checkpoints"]:
                self.checkpoints.pop((ns, ident), None)


class TurnlogSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer keeping checkpoints and pending writes in a turnlog log
    (see the module docstring).

    Parameters:
        log: the log (``turnlog.open(...)``: LMDB, memory or PostgreSQL).
        prefix: put before a thread id to make its session id.
        serde: LangGraph's serializer (its default when None).
        clock: called for event times (microseconds since the epoch); none when None.
    """

    def __init__(
        self,
        log: Log,
        *,
        prefix: str = "",
        serde: SerializerProtocol | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(serde=serde)
        check_type(log, Log, "log", what="a turnlog Log")
        self.log = log
        self.prefix = prefix
        self._clock = clock
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.Lock()

    # -- the sync API --------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names (its ``checkpoint_id``), else the thread's
        latest in its namespace; None when there is none."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        state = self._state(self._session(thread))
        if state is None:
            return None
        ident = get_checkpoint_id(config)
        if ident:
            saved = state.checkpoints.get((ns, str(ident)))
        else:
            saved = max(
                (c for (n, _), c in state.checkpoints.items() if n == ns),
                key=lambda c: c.id,
                default=None,
            )
        return None if saved is None else self._tuple(thread, state, saved)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of the config's thread (and
        namespace, when it names one), or of every thread when ``config`` is None."""
        if config is not None:
            conf = config["configurable"]
            threads = [str(conf["thread_id"])]
            ns = conf.get("checkpoint_ns")
            ident = get_checkpoint_id(config)
        else:
            threads = [
                h.session[len(self.prefix) :]
                for h in self.log.sessions()
                if h.session.startswith(self.prefix)
            ]
            ns = ident = None
        bound = get_checkpoint_id(before) if before is not None else None
        left = limit
        for thread in threads:
            state = self._state(self._session(thread))
            if state is None:
                continue
            found = sorted(
                (
                    c
                    for c in state.checkpoints.values()
                    if (ns is None or c.ns == ns)
                    and (not ident or c.id == ident)
                    and (bound is None or c.id < bound)
                ),
                key=lambda c: c.id,
                reverse=True,
            )
            for saved in found:
                if left is not None and left <= 0:
                    return
                if filter and not self._matches(saved, filter):
                    continue
                yield self._tuple(thread, state, saved)
                if left is not None:
                    left -= 1

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append a ``langgraph.checkpoint`` event (values of ``new_versions`` as blobs)."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        skeleton = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values = checkpoint.get("channel_values", {})
        blobs = [self._dump(skeleton), self._dump(get_checkpoint_metadata(config, metadata))]
        channels: dict[str, tuple[Any, int | None]] = {}
        for channel, version in new_versions.items():
            if channel in values:
                blobs.append(self._dump(values[channel]))
                channels[channel] = (version, len(blobs) - 1)
            else:
                channels[channel] = (version, None)
        data = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": conf.get("checkpoint_id"),
            "versions": checkpoint["channel_versions"],
            "channels": channels,
        }
        self._append(thread, _CHECKPOINT, data, blobs)
        return {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a ``langgraph.writes`` event for the checkpoint the config names
        (nothing when every regular write of it is stored already)."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        ident = str(conf["checkpoint_id"])
        indexed = [
            (WRITES_IDX_MAP.get(channel, i), channel, value)
            for i, (channel, value) in enumerate(writes)
        ]
        state = self._state(self._session(thread))
        stored = state.writes.get((ns, ident), {}) if state is not None else {}
        if indexed and all(index >= 0 and (task_id, index) in stored for index, _, _ in indexed):
            return
        blobs = [self._dump(value) for _, _, value in indexed]
        data = {
            "ns": ns,
            "id": ident,
            "task": task_id,
            "path": task_path,
            "writes": [[index, channel, i] for i, (index, channel, _) in enumerate(indexed)],
        }
        self._append(thread, _WRITES, data, blobs)

    #: When set, `delete_thread` also erases the content of the thread's events (its
    #: checkpoints and writes, and the blobs only they hold) with this reason
    #: (`Log.erase`, docs/erasure.md): nothing of it is left in the store.
    erase_reason: str | None = None

    def delete_thread(self, thread_id: str) -> None:
        """Hide the thread: append ``SessionRewound(to_seq=-1)`` (see the module
        docstring: nothing is deleted from the log, unless `erase_reason` is set; a
        thread that does not exist is left alone)."""
        session = self._session(str(thread_id))
        if self.log.head(session) is None:
            return
        self.log.append(
            session,
            Draft(
                body=SessionRewound(to_seq=-1, reason="langgraph.delete_thread"), time=self._time()
            ),
        )
        if self.erase_reason is not None:
            self.log.erase(session, reason=self.erase_reason, time=self._time())

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide every checkpoint whose metadata names one of ``run_ids``."""
        wanted = set(run_ids)
        for head in self.log.sessions():
            if not head.session.startswith(self.prefix):
                continue
            state = self._state(head.session)
            if state is None:
                continue
            gone = [
                [c.ns, c.id]
                for c in state.checkpoints.values()
                if self._metadata(c).get("run_id") in wanted
            ]
            if gone:
                self._append(head.session[len(self.prefix) :], _HIDDEN, {"checkpoints": gone}, [])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append the source thread's state events still in its view (checkpoints,
        writes, hidden markers, in their order) to the target thread, which then sees
        what the source sees; their blobs are shared, not copied."""
        source = self._session(str(source_thread_id))
        if self.log.head(source) is None:
            return
        alive: list[StateSaved] = []
        seqs: list[int] = []
        for event in self.log.read(source, kinds=["state", "rewind"]):
            body = event.body
            if isinstance(body, SessionRewound):
                while seqs and seqs[-1] > body.to_seq:
                    seqs.pop()
                    alive.pop()
            elif isinstance(body, StateSaved) and body.source.startswith("langgraph."):
                seqs.append(event.seq)
                alive.append(body)
        if alive:
            self.log.append(
                self._session(str(target_thread_id)),
                [Draft(body=body, time=self._time()) for body in alive],
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Hide checkpoints: all but the latest of each namespace (``keep_latest``), or
        all of them (``delete``).

        Raises:
            InvalidArgumentError: another strategy.
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError(
                f"prune strategy must be 'keep_latest' or 'delete', found {strategy!r}"
            )
        for thread in thread_ids:
            state = self._state(self._session(str(thread)))
            if state is None:
                continue
            latest: dict[str, str] = {}
            for ns, ident in state.checkpoints:
                latest[ns] = max(latest.get(ns, ident), ident)
            gone = [
                [ns, ident]
                for ns, ident in state.checkpoints
                if strategy == "delete" or latest[ns] != ident
            ]
            if gone:
                self._append(str(thread), _HIDDEN, {"checkpoints": gone}, [])

    # -- the async API (the same code in a worker thread) ----------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list` in a worker thread."""
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`put_writes` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread` in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune` in a worker thread."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    # -- internals ---------------------------------------------------------------------------------
    def _session(self, thread: str) -> str:
        return f"{self.prefix}{thread}"

    def _time(self) -> int | None:
        return self._clock() if self._clock is not None else None

    def _state(self, session: str) -> _Thread | None:
        """The thread's fold, extended with the events appended since; None when the
        session does not exist."""
        with self._lock:
            head = self.log.head(session)
            if head is None:
                self._threads.pop(session, None)
                return None
            state = self._threads.get(session)
            if state is None or state.next_seq > head.seq + 1:
                state = self._threads[session] = _Thread()
            if state.next_seq <= head.seq:
                try:
                    events = self.log.read(session, state.next_seq, head.seq + 1)
                except UnknownSessionError:
                    return None
                for event in events:
                    try:
                        state.fold(event.seq, event.body)
                    except (ValueError, KeyError, TypeError, IndexError) as exc:
                        raise StoreCorruptError(
                            f"event {session}#{event.seq} is a {event.kind} event this saver "
                            f"cannot read ({type(exc).__name__}: {exc}); it was not written "
                            "by TurnlogSaver. Run `turnlog log "
                            f"{session}` to see it"
                        ) from exc
                state.next_seq = head.seq + 1
            return state

    def _dump(self, value: Any) -> tuple[str, bytes]:
        kind, data = self.serde.dumps_typed(value)
        return kind, bytes(data)

    def _append(
        self, thread: str, source: str, data: Mapping[str, Any], blobs: Sequence[tuple[str, bytes]]
    ) -> None:
        session = self._session(thread)
        refs = tuple(
            BlobRef(
                hash=blake3.blake3(payload).hexdigest(), size=len(payload), media_type=_MEDIA + kind
            )
            for kind, payload in blobs
        )
        body = StateSaved(
            source=source, data=json.dumps(data, ensure_ascii=False, sort_keys=True), blobs=refs
        )
        draft = Draft(body=body, time=self._time())
        if blobs:
            # Checked as the append checks it (the session id too) before a blob is
            # stored: a refused append leaves no blob that no event refers to.
            self.log.validate(session, draft)
            pairs = [(ref.hash, payload) for ref, (_, payload) in zip(refs, blobs, strict=True)]

            def put_all(txn: Any) -> None:
                for digest, payload in pairs:
                    txn.put_blob(digest, payload)

            self.log.store.write(put_all)
        self.log.append(session, draft)

    def _load(self, ref: BlobRef) -> Any:
        return self.serde.loads_typed((ref.media_type[len(_MEDIA) :], self.log.blob(ref)))

    def _metadata(self, saved: _Saved) -> dict[str, Any]:
        found = self._load(saved.metadata)
        return found if isinstance(found, dict) else {}

    def _matches(self, saved: _Saved, filter: dict[str, Any]) -> bool:  # noqa: A002
        metadata = self._metadata(saved)
        return all(key in metadata and metadata[key] == value for key, value in filter.items())

    def _tuple(self, thread: str, state: _Thread, saved: _Saved) -> CheckpointTuple:
        checkpoint = self._load(saved.checkpoint)
        checkpoint["channel_values"] = {
            channel: self._load(ref)
            for channel, ref in saved.values.items()
            if ref is not None and not ref.media_type.endswith(".empty")
        }
        writes = state.writes.get((saved.ns, saved.id), {})
        parent = None
        if saved.parent:
            parent = RunnableConfig(
                configurable={
                    "thread_id": thread,
                    "checkpoint_ns": saved.ns,
                    "checkpoint_id": saved.parent,
                }
            )
        return CheckpointTuple(
            config=RunnableConfig(
                configurable={
                    "thread_id": thread,
                    "checkpoint_ns": saved.ns,
                    "checkpoint_id": saved.id,
                }
            ),
            checkpoint=checkpoint,
            metadata=self._metadata(saved),  # type: ignore[arg-type]
            parent_config=parent,
            pending_writes=[
                (task, channel, self._load(ref))
                for (task, _), (_, channel, ref, _) in writes.items()
            ],
        )


class TurnlogModelHooks:
    """Pre- and post-model hooks for LangGraph's prebuilt agent: every model call is
    packed from the thread's turnlog session and recorded (see the module docstring).

    Parameters:
        log: the log (the `TurnlogSaver`'s, so the thread is one session).
        model: the model name recorded with each request; the model table sizes the
            policy of a new session from it.
        policy: the packing policy (else the one in force, else the model's, else
            the default).
        prefix: put before a thread id to make its session id (the saver's).
        packer: a packer to share (one per log is best).
        clock: called for event times (microseconds since the epoch).
        models: the model table (the shipped one when None).
    """

    def __init__(
        self,
        log: Log,
        *,
        model: str = "",
        policy: Policy | None = None,
        prefix: str = "",
        packer: Packer | None = None,
        clock: Callable[[], int] | None = None,
        models: ModelTable | None = None,
    ) -> None:
        self.log = log
        self.model = model
        self.prefix = prefix
        self._given = policy
        table = models if models is not None else ModelTable.shipped()
        self.policy = (
            policy
            if policy is not None
            else (Policy.for_model(model, models=table) if model in table else None)
        )
        self.packer = packer if packer is not None else Packer(log)
        self._clock = clock
        self._histories: dict[str, TurnlogChatMessageHistory] = {}
        self._ids: dict[str, tuple[int, set[str]]] = {}
        self._lock = threading.Lock()

    def history(self, thread_id: str) -> TurnlogChatMessageHistory:
        """The thread's session as a LangChain chat history."""
        session = f"{self.prefix}{thread_id}"
        with self._lock:
            found = self._histories.get(session)
            if found is None:
                found = self._histories[session] = TurnlogChatMessageHistory(
                    self.log, session, policy=self._given, packer=self.packer, clock=self._clock
                )
            return found

    def pre_model(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """Append the state's new messages, pack, record the request; the packed prompt
        goes to the model as ``llm_input_messages`` (the state is left as it is)."""
        history = self.history(_thread(config))
        self._sync(history, state)
        # The policy given, else the one in force, else the model's (a new thread).
        policy = self._given
        if policy is None and self.packer.policy_in_force(history.session_id) is None:
            policy = self.policy
        packed = history.packed_messages(policy, model=self.model)
        return {"llm_input_messages": packed}

    def post_model(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """Append the model's reply (and its usage as the response to the request)."""
        self._sync(self.history(_thread(config)), state)
        return {}

    def _sync(self, history: TurnlogChatMessageHistory, state: Mapping[str, Any]) -> None:
        messages: Sequence[AnyMessage] = state.get("messages", [])
        known = self._known(history)
        new = [
            m for m in messages if not isinstance(m, BaseMessage) or not m.id or m.id not in known
        ]
        if new:
            history.add_messages(new)

    def _known(self, history: TurnlogChatMessageHistory) -> set[str]:
        """Ids of the messages the session holds (read incrementally: only the events
        appended since the last call; a rewind of everything forgets them)."""
        session = history.session_id
        head = self.log.head(session)
        with self._lock:
            next_seq, ids = self._ids.get(session, (0, set()))
            if head is None or head.seq < next_seq - 1:
                next_seq, ids = 0, set()
            if head is not None and head.seq >= next_seq:
                for event in self.log.read(session, next_seq, head.seq + 1):
                    residual = event.meta.get(META_KEY)
                    if isinstance(event.body, SessionRewound) and event.body.to_seq < 0:
                        ids = set()
                    elif isinstance(residual, dict) and residual.get("id"):
                        ids.add(str(residual["id"]))
                next_seq = head.seq + 1
            self._ids[session] = (next_seq, ids)
            return set(ids)


def _thread(config: RunnableConfig) -> str:
    conf = config.get("configurable") or {}
    thread = conf.get("thread_id")
    if thread is None:
        raise InvalidArgumentError(
            "the turnlog model hooks need a thread: run the graph with "
            "config={'configurable': {'thread_id': ...}}"
        )
    return str(thread)
