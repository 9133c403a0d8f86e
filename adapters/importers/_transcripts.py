"""Import agent transcripts into a turnlog log, and export sessions back.

Formats: Claude Code session JSONL (``claude_code``), Codex CLI rollouts
(``codex``), OpenAI Chat Completions message lists (``openai-chat``) and
Responses item lists (``openai-responses``; the wire formats' names are the
providers', and the spellings before, ``openai_chat`` and ``openai_responses``,
are accepted as aliases: see `format_name`), mini-swe-agent ``.traj.json``
(``mini_swe_agent``), SWE-agent ``.traj`` (``swe_agent``), OpenHands event
streams (``openhands``) and resolver/evaluation ``output.jsonl``
(``openhands_output``), and Aider chat-history markdown (``aider``).
docs/importers.md has each format's mapping.

Theory of operation
-------------------
An import runs in three steps per file, and nothing is written before the
third:

1. **parse**: the format module turns the bytes into a `Parsed` plan (see
   ``_plan``): sessions, each a list of entries with idempotency
   keys derived from source ids, times from the transcript, and the rest of
   every source record in ``meta``. A malformed record raises
   `turnlog.errors.ImportFormatError` naming the file, the record and the field, or
   with ``skip_bad=True`` is listed in the summary and left out.
2. **validate**: every entry is encoded exactly as `Log.append` will encode it
   (schema, UTF-8, meta shape, size after blob extraction), so a kernel
   rejection is reported against the source record too, before the store is
   touched.
3. **append**: per session, in batches: one batch up to each compaction, then
   the compaction (its covered span and ``covered_digest`` computed from the
   hashes just written) with the events after it. Re-importing the same file
   sends the same batches with the same keys, which the log recognises as
   retries: nothing is appended.

Forks (Claude Code dead branches) are appended after the session they branch
from, starting with a ``SessionForked`` event; subagents are sessions whose
first event names the parent in ``meta["parent"]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import msgspec
from turnlog import Draft, Log
from turnlog.errors import (
    Hint,
    IdempotencyError,
    ImportFormatError,
    InvalidArgumentError,
    InvalidEventError,
)
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    CompactionCommitted,
    Event,
    NotificationAdded,
    ResponseReceived,
    SessionForked,
    SystemSectionSet,
    ToolCall,
    ToolResultAdded,
    Usage,
    UserMessageAdded,
    covered_digest,
    event_from_json,
)
from turnlog.log import export_events, import_events
from turnlog.validation import check_type, refuse_unknown_options

from ..redaction import META_KEY, Redactor, check_redactor
from . import (
    _aider,
    _claude_code,
    _codex,
    _mini_swe_agent,
    _openai_chat,
    _openai_responses,
    _openhands,
    _swe_agent,
)
from ._plan import (
    JSON_ERRORS,
    BadRecord,
    CompactionEntry,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    SkippedRecord,
)

__all__ = [
    "ALIASES",
    "FORMATS",
    "ImportSummary",
    "Progress",
    "SkippedRecord",
    "detect",
    "export_session",
    "format_name",
    "import_file",
    "import_path",
]


#: Every transcript format, by name: the `Format` record each importer module declares.
_REGISTRY: dict[str, Format] = {
    f.name: f
    for f in (
        _claude_code.FORMAT,
        _codex.FORMAT,
        _openai_chat.FORMAT,
        _openai_responses.FORMAT,
        _mini_swe_agent.FORMAT,
        _swe_agent.FORMAT,
        _openhands.EVENTS_FORMAT,
        _openhands.OUTPUT_FORMAT,
        _aider.FORMAT,
    )
}

#: turnlog's own export (`turnlog.log.export_events`, ``turnlog export --complete``): read
#: back record for record, every hash unchanged, rather than parsed into a plan.
_NATIVE = "turnlog"

#: Every format name `detect` can return and `import_file` / `export_session` accept.
FORMATS: tuple[str, ...] = tuple(sorted([*_REGISTRY, _NATIVE]))

#: Earlier spellings of format names (each `Format`'s ``aliases``) -> the name.
ALIASES: dict[str, str] = {alias: f.name for f in _REGISTRY.values() for alias in f.aliases}


def format_name(name: str) -> str:
    """The one spelling of a transcript format's name: ``name`` itself, or the name an
    earlier spelling stands for (``openai_chat`` -> ``openai-chat``).

    Map every format name read from outside through it: a ``--format`` or ``format=``
    argument, or ``meta["import"]["format"]`` of an imported session's first event
    (imports made before a rename keep the spelling of their day in their bytes).

    Raises:
        ImportFormatError: no format has that name or alias (the message lists them).
    """
    if name in _REGISTRY or name == _NATIVE:
        return name
    found = ALIASES.get(name) if isinstance(name, str) else None
    if found is None:
        raise ImportFormatError(f"unknown format {name!r}; known formats: {', '.join(FORMATS)}")
    return found


# A batch stays well under Log.append's limit of 100000 events.
_BATCH = 50_000


class Progress(msgspec.Struct, frozen=True):
    """Where an import run is; passed to the ``progress`` callback.

    Attributes:
        path: the file being imported.
        files_done: files finished before this one.
        files_total: files in the run (1 for `import_file`).
        events_done: events of this file appended or confirmed so far.
        events_total: events this file maps to.
    """

    path: str
    files_done: int
    files_total: int
    events_done: int
    events_total: int


#: The ``progress`` callback type.
ProgressCallback = Callable[[Progress], None]


class ImportSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What an import run did.

    Attributes:
        format: the format name (``"mixed"`` for a directory of several formats).
        sources: the files imported.
        sessions: every session written to (or confirmed), main sessions first per file.
        roots: the sessions `export_session` rebuilds the files from (one file's
            roots, exported in order and concatenated, give that file back;
            forks and inline subagents come with their root).
        events: events the transcripts map to.
        appended: events newly appended (0 when everything was imported before).
        tool_calls: tool calls in the imported assistant messages.
        blobs: outputs and images stored as blobs.
        usage: token usage reported in the transcripts, summed.
        skipped: records (or files) left out, with the reason.
        files: for a directory, one summary per imported file, in import order
            (empty for a single file).
        redacted: secrets replaced by placeholders, counted by kind (empty
            without a redactor).
    """

    format: str
    sources: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    events: int = 0
    appended: int = 0
    tool_calls: int = 0
    blobs: int = 0
    usage: Usage = Usage()
    skipped: tuple[SkippedRecord, ...] = ()
    files: tuple[ImportSummary, ...] = ()
    redacted: dict[str, int] = {}

    @property
    def tokens(self) -> int:
        """All reported tokens: input, output, cache reads and cache writes."""
        u = self.usage
        return u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens


# -- detection ---------------------------------------------------------------------------
_CLAUDE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "attachment",
        "last-prompt",
        "ai-title",
        "permission-mode",
        "custom-title",
        "tag",
        "agent-name",
    }
)
_CLAUDE_KEYS = frozenset({"uuid", "parentUuid", "sessionId", "leafUuid", "messageId", "operation"})
_CODEX_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)


_NATIVE_KEYS = frozenset({"session", "seq", "prev", "hash", "body"})


def _line_format(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return None
    if obj.keys() >= _NATIVE_KEYS or set(obj) == {"blob", "data"}:
        return _NATIVE
    kind = obj.get("type")
    if isinstance(kind, str):  # any JSON value may be there: a dict is not even hashable
        if kind in _CODEX_TYPES and "payload" in obj:
            return "codex"
        if kind in _CLAUDE_TYPES and not _CLAUDE_KEYS.isdisjoint(obj):
            return "claude_code"
    if isinstance(obj.get("history"), list) and not {
        "instruction",
        "instance_id",
        "test_result",
        "git_patch",
    }.isdisjoint(obj):
        return "openhands_output"
    return None


def _doc_format(doc: object) -> str | None:
    if isinstance(doc, dict):
        info = doc.get("info")
        if str(doc.get("trajectory_format", "")).startswith("mini-swe-agent") or (
            isinstance(doc.get("messages"), list)
            and isinstance(info, dict)
            and "mini_version" in info
        ):
            return "mini_swe_agent"
        history = doc.get("history")
        if isinstance(history, list) and (
            not {"trajectory", "environment", "replay_config"}.isdisjoint(doc)
            or all(isinstance(m, dict) and "role" in m for m in history)
        ):
            return "swe_agent"
        if isinstance(doc.get("messages"), list):
            return _openai_chat.NAME
        if isinstance(doc.get("input"), list) or isinstance(doc.get("output"), list):
            return _openai_responses.NAME
        return _line_format(doc)
    if isinstance(doc, list) and all(isinstance(e, dict) for e in doc):
        if any("action" in e or "observation" in e for e in doc):
            return "openhands"
        if (
            doc
            and all("type" in e for e in doc)
            and any(
                isinstance(e["type"], str) and e["type"] in _openai_responses.ITEM_TYPES
                for e in doc
            )
        ):
            return _openai_responses.NAME
        if all("role" in e for e in doc):
            return _openai_chat.NAME
    return None


def _sniff(data: bytes, name: str) -> str | None:
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    base = os.path.basename(name)
    if not head:
        if base.endswith(".jsonl"):
            return "codex" if base.startswith("rollout-") else "claude_code"
        return None
    if head[:1] in b"{[":
        lines = head.split(b"\n", 50)
        for line in lines[:50]:
            if not line.strip():
                continue
            try:
                found = _line_format(msgspec.json.decode(line))
            except JSON_ERRORS:
                continue
            if found:
                return found
            break
        try:
            return _doc_format(msgspec.json.decode(head))
        except JSON_ERRORS:
            return None
    if _aider.sniff(head):
        return "aider"
    return None


def detect(source: str | os.PathLike[str] | bytes, *, name: str = "") -> str:
    """The transcript format of a file (or of its bytes), judged from the content.

    Parameters:
        source: a path, or the file's bytes.
        name: the file name when ``source`` is bytes (used only for empty files,
            whose content says nothing).

    Returns:
        One of `FORMATS`.

    Raises:
        ImportFormatError: the content is no known transcript format.
    """
    check_type(source, (str, os.PathLike, bytes), "source", what="a path, or the file's bytes")
    if isinstance(source, bytes):
        data = source
    else:
        name = os.fspath(source)
        data = _read(name)
    found = _sniff(data, name)
    if found is None:
        raise ImportFormatError(
            f"{name or '<bytes>'}: not a transcript of a known format (expected one of "
            f"{', '.join(FORMATS)})",
            hint=Hint(
                cli="pass --format FORMAT if you know it", python="pass format= if you know it"
            ),
        )
    return found


def _read(path: str) -> bytes:
    file = Path(path)
    try:
        if file.exists() and not file.is_file():
            # A device or a pipe (/dev/zero) may never end: read regular files only.
            raise ImportFormatError(
                f"{path}: not a regular file; give a transcript file or a directory of them"
            )
        return file.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc
    except MemoryError:
        raise ImportFormatError(
            f"{path}: the file does not fit in memory; split it, or "
            "import it where more memory is available"
        ) from None


# -- import -----------------------------------------------------------------------------
def _check_target(log: object, path: object, call: str) -> None:
    """The log and the path of an import (given the other way round, or a store's path
    for the log, they failed with a TypeError or an AttributeError)."""
    usage = f"{call}(turnlog.open(store), path)"
    check_type(log, Log, "log", what="a turnlog Log", hint=f"open one and pass it: {usage}")
    check_type(
        path,
        (str, os.PathLike),
        "path",
        what="a str or os.PathLike naming a transcript",
        hint=f"call it as {usage}",
    )


@refuse_unknown_options("import_file()", usage='import_file(turnlog.open(path), "session.jsonl")')
def import_file(
    log: Log,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,  # noqa: A002
    session: str | None = None,
    skip_bad: bool = False,
    progress: ProgressCallback | None = None,
    redactor: Redactor | None = None,
) -> ImportSummary:
    """Import one transcript file.

    Parameters:
        log: the log to append to.
        path: the file.
        format: one of `FORMATS`; detected from the content when None.
        session: the session id of the file's main session (further sessions of
            the file are named ``<session>/<suffix>``); derived from the
            transcript when None (Claude Code and Codex session ids; a name
            and a digest of the file for the others).
        skip_bad: leave malformed records out (listed in ``skipped``) instead of
            failing.
        progress: called after each appended batch.
        redactor: replaces the secrets in every event before it is appended (a
            `turnlog.adapters.redaction.Redactor`; None, the default, keeps the
            text as it is). A turnlog export is read back as it is (its events are
            hashed already).

    Returns:
        An `ImportSummary`.

    Raises:
        ImportFormatError: unknown format, or a malformed record (the message
            names the file, the record and the field); nothing of the file was
            appended.
        KernelError: the store failed.
    """
    _check_target(log, path, "import_file")
    check_redactor(redactor)
    name = os.fspath(path)
    data = _read(name)
    fmt = _choose_format(data, name, format)
    if fmt == _NATIVE:
        return _import_native(log, data, name, session)
    parsed = _parse(fmt, data, name, skip_bad)
    return _import_parsed(
        log,
        parsed,
        name,
        session=session,
        skip_bad=skip_bad,
        progress=progress,
        files=(0, 1),
        redactor=redactor,
    )


class _StoppedImportError(ImportFormatError):
    """A directory import stopped at a file that cannot be imported; ``imported``
    summarizes the files imported before it, which stay imported."""

    def __init__(self, message: str, *, hint: Hint, imported: ImportSummary) -> None:
        super().__init__(message, hint=hint)
        self.imported = imported


class _Line(msgspec.Struct):
    """The session an exported line belongs to (None: a blob line)."""

    session: str | None = None


_LINE = msgspec.json.Decoder(_Line)


def _import_native(log: Log, data: bytes, name: str, session: str | None) -> ImportSummary:
    """A turnlog export, read back record for record (`turnlog.log.import_events`)."""
    lines = data.split(b"\n")
    sessions: list[str] = []
    events: list[bytes] = []
    for line in lines:
        try:
            found = _LINE.decode(line).session if line.strip() else None
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            found = None  # import_events names the line
        if found is not None:
            events.append(line)
            if found not in sessions:
                sessions.append(found)
    if session is not None and sessions and session != sessions[-1]:
        raise ImportFormatError(
            f"{name}: a turnlog export keeps its session ids ({sessions[-1]!r} here): they are "
            "part of every hash. Import it without session=; nothing was imported"
        )
    try:
        copied = import_events(log, lines, origin=name)
    except InvalidArgumentError as exc:  # the store holds a session with other events
        raise ImportFormatError(f"{name}: {exc}") from None
    # Every line was verified (or the import raised): each event line decodes.
    tool_calls, usage = _tally(event_from_json(line).body for line in events)
    return ImportSummary(
        format=_NATIVE,
        sources=(name,),
        sessions=tuple(sessions),
        roots=tuple(sessions[-1:]),
        events=len(events),
        appended=copied.events,
        tool_calls=tool_calls,
        blobs=copied.blobs,
        usage=usage,
    )


def _choose_format(data: bytes, name: str, format: str | None) -> str:  # noqa: A002
    if format is None:
        return detect(data, name=name)
    try:
        return format_name(format)
    except ImportFormatError as exc:
        raise ImportFormatError(f"{name}: {exc}") from None


def _parse(fmt: str, data: bytes, name: str, skip_bad: bool) -> Parsed:
    try:
        parsed = _REGISTRY[fmt].parse(data, name, skip_bad)
    except RecursionError:
        raise ImportFormatError(
            f"{name}: a record is nested too deeply to read as a {fmt} transcript; nothing "
            "of this file was imported"
        ) from None
    except BadRecord as exc:
        raise ImportFormatError(
            f"{name}: {exc.where}: {('field ' + exc.field + ': ') if exc.field else ''}"
            f"{exc.reason}; nothing of this file was imported",
            hint=Hint(
                cli="fix the record, or pass --skip-bad to leave malformed records out",
                python="fix the record, or pass skip_bad=True to leave malformed records out",
            ),
        ) from None
    if parsed.skipped and all(
        entry.meta.get("carrier") for plan in parsed.plans for entry in plan.entries
    ):
        # Every record was malformed: the file is not a transcript of this format.
        raise ImportFormatError(
            f"{name}: no record could be read as a {fmt} transcript ({len(parsed.skipped)} "
            f"malformed, the first: {parsed.skipped[0]}); nothing of this file was "
            "imported (is it a transcript of another format?)"
        )
    return parsed


_TRANSCRIPT_SUFFIXES = (".jsonl", ".json", ".traj", ".md")
# The file endings of each format, for a directory imported with one format forced.
_FORMAT_SUFFIXES = {
    "claude_code": (".jsonl",),
    "codex": (".jsonl",),
    "openhands_output": (".jsonl",),
    "aider": (".md",),
    _NATIVE: (".jsonl",),
}


@refuse_unknown_options("import_path()", usage='import_path(turnlog.open(path), "transcripts/")')
def import_path(
    log: Log,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,  # noqa: A002
    session: str | None = None,
    skip_bad: bool = False,
    progress: ProgressCallback | None = None,
    keep_going: bool = False,
    redactor: Redactor | None = None,
) -> ImportSummary:
    """Import a transcript file, or every transcript under a directory (recursively).

    In a directory, files ending in ``.jsonl``, ``.json``, ``.traj`` or ``.md``
    are considered, in path order; files whose content is no known transcript
    are listed in ``skipped`` (``.md`` files only when they are Aider chat
    histories). Claude Code subagent files (``agent-*.jsonl``, ``subagents/``)
    are imported after the sessions that spawned them and linked to the
    spawning call when the parent's transcript names it. Each file is atomic:
    a malformed record fails its file (nothing of it appended), after the files
    before it were imported (the error names them); with ``keep_going`` the
    file is listed in ``skipped`` instead and the run goes on.

    Parameters:
        log: the log to append to.
        path: a file or a directory.
        format: force one format for every file (None: detect each).
        session: for a single file, as in `import_file`; for a directory, a
            prefix: each file's sessions are named ``<session>/<file stem>...``.
        skip_bad: leave malformed records out instead of failing.
        progress: called per file and per appended batch.
        keep_going: in a directory, list a file that cannot be read or imported
            in ``skipped`` (with the reason) and go on with the next.
        redactor: see `import_file`.

    Returns:
        One `ImportSummary` over all files (``files`` holds each file's).

    Raises:
        ImportFormatError: see `import_file`.
    """
    _check_target(log, path, "import_path")
    check_redactor(redactor)
    root = Path(path)
    try:
        is_dir = root.is_dir()
    except OSError as exc:  # a name too long, a loop of links...
        raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    if not is_dir:
        return import_file(
            log,
            root,
            format=format,
            session=session,
            skip_bad=skip_bad,
            progress=progress,
            redactor=redactor,
        )
    if format is not None:
        format = _choose_format(b"", str(root), format)  # refuses an unknown name  # noqa: A001
    suffixes = (
        _FORMAT_SUFFIXES.get(format or "", (".json", ".traj")) if format else _TRANSCRIPT_SUFFIXES
    )
    candidates = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    found: list[tuple[Path, bytes, str]] = []
    skipped: list[SkippedRecord] = []
    for file in candidates:
        try:
            data = _read(str(file))
        except ImportFormatError as exc:
            if not keep_going:
                raise
            skipped.append(SkippedRecord(str(file), "", "", str(exc).removeprefix(f"{file}: ")))
            continue
        if file.suffix == ".md" and format is None and not _aider.sniff(data):
            continue
        fmt = format or _sniff(data, file.name)
        if fmt is None:
            skipped.append(SkippedRecord(str(file), "", "", "not a transcript of a known format"))
            continue
        found.append((file, data, fmt))
    # Parents before their subagents, so that links can name the spawning call.
    found.sort(key=lambda item: (_claude_code.is_subagent_file(item[0]), str(item[0])))
    links: dict[str, dict[str, str]] = {}
    summaries: list[ImportSummary] = []
    for number, (file, data, fmt) in enumerate(found):
        try:
            if fmt == _NATIVE:  # a turnlog export: read back record for record
                name = None if session is None else f"{session}/{file.stem}"
                summaries.append(_import_native(log, data, str(file), name))
                continue
            parsed = _parse(fmt, data, str(file), skip_bad)
            if fmt == "claude_code":
                _claude_code.link_subagents(parsed, links)
            name = None if session is None else f"{session}/{file.stem}"
            summaries.append(
                _import_parsed(
                    log,
                    parsed,
                    str(file),
                    session=name,
                    skip_bad=skip_bad,
                    progress=progress,
                    files=(number, len(found)),
                    redactor=redactor,
                )
            )
        except ImportFormatError as exc:
            if keep_going:
                # The reason without the hint: what to do is the run's to say, not the file's.
                reason = str(exc.args[0]) if exc.args else str(exc)
                skipped.append(SkippedRecord(str(file), "", "", reason.removeprefix(f"{file}: ")))
                continue
            if not summaries:
                raise
            done = ", ".join(s.sources[0] if s.sources else "?" for s in summaries)
            before = (
                "the file before it was"
                if len(summaries) == 1
                else f"the {len(summaries)} files before it were"
            )
            again = (
                "import the directory again with {} to go past bad files (imported "
                "files are not appended twice)"
            )
            hint = exc.hint or Hint(cli="", python="")
            raise _StoppedImportError(
                str(exc.args[0]) if exc.args else "",
                hint=Hint(
                    cli="; ".join(
                        filter(
                            None,
                            (hint.cli, f"{before} imported ({done})", again.format("--keep-going")),
                        )
                    ),
                    python="; ".join(
                        filter(
                            None,
                            (
                                hint.python,
                                f"{before} imported ({done})",
                                again.format("keep_going=True"),
                            ),
                        )
                    ),
                ),
                imported=_merge(summaries, skipped),
            ) from exc
    return _merge(summaries, skipped)


def _merge(summaries: Sequence[ImportSummary], skipped: list[SkippedRecord]) -> ImportSummary:
    formats = {s.format for s in summaries}
    usage = Usage(
        **{f: sum(getattr(s.usage, f) for s in summaries) for f in Usage.__struct_fields__}
    )
    return ImportSummary(
        format=formats.pop() if len(formats) == 1 else ("mixed" if formats else ""),
        sources=tuple(src for s in summaries for src in s.sources),
        sessions=tuple(x for s in summaries for x in s.sessions),
        roots=tuple(x for s in summaries for x in s.roots),
        events=sum(s.events for s in summaries),
        appended=sum(s.appended for s in summaries),
        tool_calls=sum(s.tool_calls for s in summaries),
        blobs=sum(s.blobs for s in summaries),
        usage=usage,
        skipped=tuple(skipped) + tuple(x for s in summaries for x in s.skipped),
        files=tuple(summaries),
        redacted=_counts(s.redacted for s in summaries),
    )


def _counts(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for kind, n in one.items():
            total[kind] = total.get(kind, 0) + n
    return dict(sorted(total.items()))


def _redact(parsed: Parsed, redactor: Redactor) -> dict[str, int]:
    """Replace the secrets of every entry (its payload, a compaction's summary, its
    meta) before anything is validated or appended; the counts by kind."""
    found: list[dict[str, int]] = []
    for plan in parsed.plans:
        for entry in plan.entries:
            if isinstance(entry, CompactionEntry):
                entry.summary, counts = redactor.text(entry.summary)
                entry.meta, in_meta = redactor.meta(entry.meta)
                counts = _counts((counts, in_meta))
                if counts:
                    entry.meta[META_KEY] = counts
            else:
                draft = redactor.draft(Draft(body=entry.body, meta=entry.meta))
                entry.body, entry.meta = draft.body, draft.meta
                counts = draft.meta.get(META_KEY) or {}
            found.append(counts)
    return _counts(found)


def _session_ids(parsed: Parsed, session: str | None) -> list[str]:
    """One session id per plan, each used once. A plan whose id an earlier plan with
    entries has taken (two dead branches whose root ids share their first 8
    characters) gets ``-2``, ``-3``...: the same ids on every import of the same
    file. Sharing a session, the second plan would fork into a session that has
    events, or repeat the first one's keys."""
    plans = parsed.plans
    if session is None:
        ids = [p.natural for p in plans]
    elif len(plans) == 1:
        ids = [session]
    else:
        ids = [session if not p.suffix else f"{session}/{p.suffix}" for p in plans]
    taken: set[str] = set()
    unique = []
    for plan, wanted in zip(plans, ids, strict=True):
        name, n = wanted, 1
        while name in taken:
            n += 1
            name = f"{wanted}-{n}"
        if plan.entries:
            taken.add(name)
        unique.append(name)
    return unique


class _Run:
    """Counters and the key -> seq index of one file's import."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.appended = 0
        self.blobs = 0
        self.seqs: dict[tuple[int, str], int] = {}


def _import_parsed(
    log: Log,
    parsed: Parsed,
    source: str,
    *,
    session: str | None,
    skip_bad: bool,
    progress: ProgressCallback | None,
    files: tuple[int, int],
    redactor: Redactor | None,
) -> ImportSummary:
    skipped = list(parsed.skipped)
    redacted = _redact(parsed, redactor) if redactor is not None else {}
    ids = _session_ids(parsed, session)
    label = os.path.basename(source)
    for plan, sid in zip(parsed.plans, ids, strict=True):
        if not plan.entries:
            continue
        head: Obj = {"import": {"format": _spelling(log, sid, parsed, plan), "source": label}}
        if plan.parent is not None:
            link = dict(plan.parent)
            if "plan" in link:
                link["session"] = ids[link.pop("plan")]
            head["parent"] = link
        first = plan.entries[0]
        first.meta = {**head, **first.meta}
    blobs = _validate(log, parsed, ids, source, skip_bad, skipped)
    for data, media_type in parsed.blobs.values():
        log.put_blob(data, media_type)
    total = sum(len(p.entries) + (p.fork is not None) for p in parsed.plans)
    run = _Run(total)
    run.blobs = blobs + len(parsed.blobs)
    for index, plan in enumerate(parsed.plans):
        if plan.entries:
            _append_plan(log, parsed, index, ids, run, source, progress, files)
    tool_calls, usage = _tally(
        entry.body for plan in parsed.plans for entry in plan.entries if isinstance(entry, Entry)
    )
    if progress is not None:
        progress(
            Progress(
                path=source,
                files_done=files[0] + 1,
                files_total=files[1],
                events_done=run.done,
                events_total=run.total,
            )
        )
    used = [ids[i] for i, p in enumerate(parsed.plans) if p.entries]
    roots = [
        ids[i]
        for i, p in enumerate(parsed.plans)
        if p.entries and p.fork is None and not (p.parent or {}).get("inline")
    ]
    return ImportSummary(
        format=parsed.format,
        sources=(source,),
        sessions=tuple(used),
        roots=tuple(roots),
        events=total,
        appended=run.appended,
        tool_calls=tool_calls,
        blobs=run.blobs,
        usage=usage,
        skipped=tuple(skipped),
        redacted=redacted,
    )


def _tally(bodies: Iterable[Body | None]) -> tuple[int, Usage]:
    """The tool calls of the assistant messages and the usage the responses report."""
    tool_calls = 0
    usage = [0, 0, 0, 0, 0]
    for body in bodies:
        if isinstance(body, AssistantMessageAdded):
            tool_calls += sum(isinstance(p, ToolCall) for p in body.parts)
        elif isinstance(body, ResponseReceived):
            u = body.usage
            for i, value in enumerate(
                (
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_tokens,
                    u.cache_write_tokens,
                    u.reasoning_tokens,
                )
            ):
                usage[i] += value
    return tool_calls, Usage(
        input_tokens=usage[0],
        output_tokens=usage[1],
        cache_read_tokens=usage[2],
        cache_write_tokens=usage[3],
        reasoning_tokens=usage[4],
    )


def _spelling(log: Log, sid: str, parsed: Parsed, plan: Plan) -> str:
    """The format name to write into the plan's first event: the format's name, or the
    earlier spelling an import of the same transcript wrote there before (and the
    carrier sections' names with it), so that importing it again is a retry."""
    spec = _REGISTRY.get(parsed.format)
    if spec is None or not spec.aliases or log.head(sid) is None:
        return parsed.format
    first = plan.entries[0]
    seq = log.find_key(sid, first.key)
    stored = log.get(sid, seq).meta.get("import") if seq is not None else None
    old = stored.get("format") if isinstance(stored, dict) else None
    if not isinstance(old, str) or old not in spec.aliases:
        return parsed.format
    carrier = f"{parsed.format}.records"
    for entry in plan.entries:
        if (
            isinstance(entry, Entry)
            and isinstance(entry.body, SystemSectionSet)
            and entry.body.name == carrier
        ):
            entry.body = msgspec.structs.replace(entry.body, name=f"{old}.records")
    return old


def _validate(
    log: Log,
    parsed: Parsed,
    ids: list[str],
    source: str,
    skip_bad: bool,
    skipped: list[SkippedRecord],
) -> int:
    """Encode every entry as `Log.append` will; returns the number of blobs it will store."""
    blobs = 0
    for plan, sid in zip(parsed.plans, ids, strict=True):
        kept: list[Entry | CompactionEntry] = []
        keys: dict[str, str] = {}  # idempotency key -> the record that has it
        for entry in plan.entries:
            try:
                if entry.key in keys:  # two source records with one id
                    raise InvalidEventError(
                        f"its id gives idempotency key {entry.key!r}, the key of "
                        f"{keys[entry.key]} too: records of a session need distinct ids"
                    )
                blobs += _check(log, sid, entry)
                keys[entry.key] = entry.where
            except (InvalidEventError, ValueError) as exc:
                if not skip_bad:
                    raise ImportFormatError(
                        f"{source}: {entry.where}: {exc}; nothing of this file was imported",
                        hint=Hint(
                            cli="pass --skip-bad to leave the record out",
                            python="pass skip_bad=True to leave the record out",
                        ),
                    ) from exc
                skipped.append(SkippedRecord(source, entry.where, "", str(exc)))
                continue
            kept.append(entry)
        plan.entries = kept
    return blobs


def _check(log: Log, session: str, entry: Entry | CompactionEntry) -> int:
    body: Body = (
        _compaction(entry, 0, 0, "0" * 64) if isinstance(entry, CompactionEntry) else entry.body
    )
    draft = Draft(body=body, time=entry.time, key=entry.key, meta=entry.meta)
    try:
        return log.validate(session, draft)
    except InvalidEventError as exc:  # named by the record, not by the batch index
        raise InvalidEventError(f"{entry.where}: {str(exc).partition(': ')[2] or exc}") from exc


def _compaction(
    entry: CompactionEntry,
    first: int,
    last: int,
    digest: str,
) -> CompactionCommitted:
    return CompactionCommitted(
        first_seq=first,
        last_seq=last,
        covered_digest=digest,
        summary=entry.summary,
        summarizer=entry.summarizer,
        model=entry.model,
        reason="imported",
        tokens_before=entry.tokens_before,
        tokens_after=entry.tokens_after,
    )


def _append_plan(
    log: Log,
    parsed: Parsed,
    index: int,
    ids: list[str],
    run: _Run,
    source: str,
    progress: ProgressCallback | None,
    files: tuple[int, int],
) -> None:
    plan = parsed.plans[index]
    sid = ids[index]
    drafts: list[Draft] = []
    head = [-1]  # seq of the last event this run appended or confirmed

    def flush() -> None:
        for start in range(0, len(drafts), _BATCH):
            chunk = drafts[start : start + _BATCH]
            try:
                done = log.append(sid, chunk)
            except IdempotencyError as exc:
                raise ImportFormatError(
                    f"{source}: session {sid!r} holds an earlier import of this transcript "
                    f"that differs from it now ({exc}); import it into a new session "
                    "(session=...)"
                ) from exc
            head[0] = done.last_seq
            for offset, draft in enumerate(chunk):
                if draft.key is not None:
                    run.seqs[(index, draft.key)] = done.first_seq + offset
            if not done.duplicate:
                run.appended += len(chunk)
            run.done += len(chunk)
            if progress is not None:
                progress(
                    Progress(
                        path=source,
                        files_done=files[0],
                        files_total=files[1],
                        events_done=run.done,
                        events_total=run.total,
                    )
                )
        drafts.clear()

    if plan.fork is not None:
        parent, parent_key = plan.fork
        at = _fork_seq(parsed, parent, parent_key, run)
        if at is None:  # nothing to fork after: keep the branch as a plain session
            plan.parent = {"session": ids[parent], "branch_of": parent_key}
        else:
            source_event = log.get(ids[parent], at)
            fork = SessionForked(
                from_session=ids[parent], from_seq=at, from_hash=source_event.hash.hex()
            )
            first = plan.entries[0]
            drafts.append(Draft(body=fork, key=f"fork:{parent_key}"[:256], time=first.time))
    for entry in plan.entries:
        if isinstance(entry, CompactionEntry):
            flush()
            drafts.append(_compaction_draft(log, sid, entry, head[0]))
        else:
            drafts.append(Draft(body=entry.body, time=entry.time, key=entry.key, meta=entry.meta))
    flush()


def _fork_seq(parsed: Parsed, parent: int, key: str, run: _Run) -> int | None:
    """The seq of the parent entry named ``key``, or of the nearest kept entry before it."""
    found = run.seqs.get((parent, key))
    if found is not None:
        return found
    entries = parsed.plans[parent].entries
    order = [e.key for e in entries]
    if key not in order:
        return None
    for earlier in reversed(order[: order.index(key)]):
        found = run.seqs.get((parent, earlier))
        if found is not None:
            return found
    return None


def _compaction_draft(log: Log, sid: str, entry: CompactionEntry, head: int) -> Draft:
    """The compaction as it lands after own seq ``head``: covering every position of
    the lineage before it."""
    lineage = log.lineage(sid, head + 1) if head >= 0 else []
    last = len(lineage) - 1
    if last < 0 or last > head:
        # Nothing before it, or a fork (whose lineage positions the log does not let a
        # compaction of the fork cover): keep the summary as the text it was.
        body: Body = NotificationAdded(
            source=f"{entry.summarizer}/compact-summary", text=entry.summary
        )
        return Draft(
            body=body,
            time=entry.time,
            key=entry.key,
            meta={**entry.meta, "compaction_not_covering": True},
        )
    digest = covered_digest([event.hash for event in lineage])
    return Draft(
        body=_compaction(entry, 0, last, digest), time=entry.time, key=entry.key, meta=entry.meta
    )


# -- export -----------------------------------------------------------------------------
def export_session(log: Log, session: str, format: str) -> bytes:  # noqa: A002
    """A session written back in a transcript format.

    An imported session comes back as the records it was imported from (with
    the original record order, ids and fields); a session built in turnlog is
    written with ids and timestamps derived from its events. docs/importers.md
    lists what each format cannot carry.

    Parameters:
        log: the log.
        session: the session (for Claude Code, its forks and inline subagents
            are written into the same file).
        format: one of `FORMATS`.

    Returns:
        The file's bytes.

    Raises:
        ImportFormatError: unknown format.
        UnknownSessionError: no such session.
    """
    format = format_name(format)  # noqa: A001
    if format == _NATIVE:
        return b"".join(export_events(log, session))
    spec = _REGISTRY[format]
    children: dict[str, list[str]] = {}
    if spec.children:
        children = _children_index(log)
    return spec.export(_export_view(log, session, children, format))


def _children_index(log: Log) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    with log.snapshot() as snap:
        for head in snap.sessions():
            first = snap.get(head.session, 0)
            body = first.body
            if isinstance(body, SessionForked):
                index.setdefault(body.from_session, []).append(head.session)
                continue
            link = first.meta.get("parent")
            if (
                isinstance(link, dict)
                and (link.get("inline") or link.get("branch_of"))
                and isinstance(link.get("session"), str)
            ):
                index.setdefault(link["session"], []).append(head.session)
    return index


def _export_view(
    log: Log,
    session: str,
    children: dict[str, list[str]],
    format: str,  # noqa: A002
) -> ExportSession:
    events = [_with_full_text(log, e) for e in log.read(session)]
    if events and _imported_from(events[0]) not in (None, format):
        # The source records kept in meta are another format's: written into this
        # one they would give records of neither (or fail to rebuild). The session
        # is written from its events, as one built in turnlog is.
        events = [_without_source(e) for e in events]
    kids = [_export_view(log, child, children, format) for child in children.get(session, ())]
    return ExportSession(session=session, events=events, children=kids, blob=log.blob)


#: The meta keys an import writes to give its file back (docs/importers.md, "What
#: `meta` holds"), which only an export to the same format can read.
_SOURCE_META = frozenset(
    {
        "import",
        "raw",
        "records",
        "cont",
        "before",
        "after",
        "line",
        "index",
        "derived",
        "carrier",
        "doc",
        "boundary",
        "exit_code",
        "raw_text",
        "header_text",
        "tail_text",
        "preamble",
        "no_final_newline",
        "compaction_not_covering",
    }
)


def _imported_from(first: Event) -> str | None:
    """The format a session was imported from (None: not imported)."""
    stored = first.meta.get("import")
    name = stored.get("format") if isinstance(stored, dict) else None
    if not isinstance(name, str):
        return None
    try:
        return format_name(name)
    except ImportFormatError:
        return name


def _without_source(event: Event) -> Event:
    if not any(key in _SOURCE_META for key in event.meta):
        return event
    meta = {k: v for k, v in event.meta.items() if k not in _SOURCE_META}
    return msgspec.structs.replace(event, meta=meta)


def _with_full_text(log: Log, event: Event) -> Event:
    body = event.body
    if (
        isinstance(body, (ToolResultAdded, NotificationAdded, UserMessageAdded))
        and body.blob is not None
    ):
        text = log.blob(body.blob).decode("utf-8")
        field = "output" if isinstance(body, ToolResultAdded) else "text"
        body = msgspec.structs.replace(body, **{field: text, "blob": None})
        return msgspec.structs.replace(event, body=body)
    return event
