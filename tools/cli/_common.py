"""Shared pieces of the ``turnlog`` verbs: exit codes, errors, output, opening stores,
argument types."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import msgspec
import turnlog
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
from rich.progress import Progress as ProgressBar
from rich.text import Text
from turnlog import Replayer
from turnlog.packing import Packed

from .. import demo
from ..terminal import make_console, visible
from ._verbs import arg, one_of

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_NO_STORE = 4

DEFAULT_STORE = "./.turnlog"


class _UsageError(Exception):
    """Bad input from the command line or a file it names (exit 2)."""


class _NoStoreError(Exception):
    """The store does not exist (exit 4)."""


class _PipeClosedError(Exception):
    """stdout was closed by its reader (``turnlog log s | head``).

    Raised instead of `BrokenPipeError` while a read snapshot is open: the
    store converts OSErrors raised inside a snapshot into `StoreError`.
    """


# -- output helpers -------------------------------------------------------------------


def _plural(count: int, word: str, many: str = "") -> str:
    """``1 event``, ``2 events``, ``1,024 events``."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def _out() -> Console:
    """The console for human output on stdout (colour only on a terminal)."""
    return make_console(sys.stdout)


def _say(text: str, style: str = "") -> None:
    """One line of human output, in ``style`` on a terminal."""
    _out().print(Text(visible(text), style=style))


def _emit(obj: object, out: IO[str]) -> None:
    _write_line(json.dumps(obj, ensure_ascii=False), out)


def _write_line(text: str, out: IO[str]) -> None:
    try:
        out.write(text + "\n")
    except BrokenPipeError:
        raise _PipeClosedError from None


def _write_stdout_bytes(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
    except BrokenPipeError:
        raise _PipeClosedError from None


def _store_path(args: argparse.Namespace) -> Path:
    value = args.store or os.environ.get("TURNLOG_STORE") or DEFAULT_STORE
    return Path(value)


def _is_url(value: str) -> bool:
    """True for a PostgreSQL URL (a store on a server rather than a directory)."""
    return value.startswith(("postgresql://", "postgres://"))


def _open(args: argparse.Namespace, *, write: bool = False, create: bool = False) -> turnlog.Log:
    """Open the store of ``--store``, and complete the session ids the verb takes
    (the arguments its declaration marks with `session_arg`) from unique prefixes.
    Only a verb that may ``create`` the store opens one that is missing."""
    value = args.store or os.environ.get("TURNLOG_STORE") or DEFAULT_STORE
    log = _open_store(value, write=write, create=create)
    try:
        for dest in getattr(args, "session_args", ()):
            given = getattr(args, dest, None)
            if isinstance(given, str):
                setattr(args, dest, _resolve_session(log, given))
            elif isinstance(given, list):
                setattr(args, dest, [_resolve_session(log, one) for one in given])
    except BaseException:
        log.close()
        raise
    return log


#: At most this many candidates are listed for an ambiguous session prefix.
_CANDIDATES_SHOWN = 10


def _resolve_session(log: turnlog.Log, given: str) -> str:
    """The session ``given`` names: itself if it exists, else the one session whose id
    begins with it (as ``blob`` takes a hash prefix).

    Raises:
        UnknownSessionError: no session begins with it (naming the closest ids).
        _UsageError: several do (listing them).
    """
    if not given or log.head(given) is not None:
        return given
    ids = [head.session for head in log.sessions()]
    found = [one for one in ids if one.startswith(given)]
    if len(found) == 1:
        return found[0]
    if found:
        shown = ", ".join(repr(one) for one in found[:_CANDIDATES_SHOWN])
        more = (
            f" and {len(found) - _CANDIDATES_SHOWN:,} more"
            if len(found) > _CANDIDATES_SHOWN
            else ""
        )
        raise _UsageError(
            f"session prefix {given!r} is ambiguous: {len(found):,} sessions "
            f"begin with it ({shown}{more}); give more of the id"
        )
    close = difflib.get_close_matches(given, ids, n=3)
    guess = f" (did you mean {' or '.join(repr(one) for one in close)}?)" if close else ""
    raise turnlog.errors.UnknownSessionError(
        f"no session {given!r} in this log, and none whose id begins with it{guess}; list "
        "sessions with `turnlog sessions`"
    )


def _open_store(value: str, *, write: bool = False, create: bool = False) -> turnlog.Log:
    if _is_url(value):
        try:
            # A schema without turnlog's tables is refused by every verb but those that
            # create a store (opening for writing would create them).
            return turnlog.open(value, readonly=not write, create=write and create)
        except turnlog.errors.StoreNotFoundError:
            where = turnlog.stores.hide_credentials(value)
            raise _NoStoreError(
                f"no turnlog store at {where} (its schema has no turnlog tables); check "
                "--store or TURNLOG_STORE (create a store with `turnlog demo` or `turnlog "
                "import`, or by appending to it)"
            ) from None
    path = Path(value)
    where = turnlog.stores.hide_credentials(str(path))
    try:
        missing = not (write and create) and not (path / "data.mdb").is_file()
    except OSError as exc:  # a name too long, a loop of links...
        raise _NoStoreError(
            f"no turnlog store at {where!r}: {exc.strerror or exc}; pass "
            "--store PATH or set TURNLOG_STORE"
        ) from None
    if missing:
        raise _NoStoreError(
            f"no turnlog store at {where!r}; pass --store PATH or set TURNLOG_STORE "
            "(create a store with `turnlog demo` or by appending to it)"
        )
    return turnlog.open(path, readonly=not write)


def _read_bytes(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _UsageError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from exc


def _read_key(path: str | None) -> bytes | None:
    if path is None:
        return None
    key = _read_bytes(path, "key file")
    if key.endswith(b"\r\n"):
        key = key[:-2]
    elif key.endswith(b"\n"):
        key = key[:-1]
    if not key:
        raise _UsageError(f"key file {path!r} is empty")
    return key


def _read_checkpoint(path: str) -> turnlog.log.Checkpoint:
    data = _read_bytes(path, "checkpoint file")
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise _UsageError(f"checkpoint file {path!r} is not JSON: {exc}") from exc
    except RecursionError:
        raise _UsageError(
            f"checkpoint file {path!r} is not a turnlog checkpoint: its JSON is nested too deeply"
        ) from None
    if not isinstance(raw, dict):
        raise _UsageError(f"checkpoint file {path!r} must hold a JSON object")
    session, seq, digest, mac = (
        raw.get("session"),
        raw.get("seq"),
        raw.get("hash"),
        raw.get("mac", ""),
    )
    unknown = sorted(set(raw) - {"session", "seq", "hash", "mac"})
    if (
        unknown
        or not isinstance(session, str)
        or not session
        or not isinstance(seq, int)
        or isinstance(seq, bool)
        or seq < 0
        or not isinstance(digest, str)
        or len(digest) != 64
        or any(c not in "0123456789abcdef" for c in digest)
        or not isinstance(mac, str)
        or (mac and (len(mac) != 64 or any(c not in "0123456789abcdef" for c in mac)))
    ):
        raise _UsageError(
            f"checkpoint file {path!r} is not a turnlog checkpoint: expected "
            '{"session": str, "seq": int >= 0, "hash": 64 lowercase hex, '
            '"mac": "" or 64 lowercase hex}'
            + (f", found unknown keys {unknown}" if unknown else "")
        )
    return turnlog.log.Checkpoint(session=session, seq=seq, hash=digest, mac=mac)


def _write_output(path: str | None, data: bytes) -> None:
    if path is None:
        sys.stdout.flush()
        _write_stdout_bytes(data)
        return
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise _UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from exc


def _refs(count: int) -> str:
    return f"{count} blob ref{'s' * (count != 1)}"


def _problem_json(problem: turnlog.log.Problem | None) -> dict[str, Any] | None:
    if problem is None:
        return None
    return {
        "session": problem.session,
        "seq": problem.seq,
        "reason": problem.reason,
        "blob": problem.blob,
        "where": str(problem),
    }


def _verify_progress(events: int) -> None:
    print(f"verify: {events:,} events checked", file=sys.stderr, flush=True)


def _spans(numbers: list[int]) -> str:
    """``1-40`` or ``1-3, 7`` for sorted turn numbers."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"turn {a}" if a == b else f"turns {a}-{b}" for a, b in spans)


def _next_steps(args: argparse.Namespace, steps: list[tuple[str, str]]) -> None:
    """What to try next, as commands that work on this store."""
    shown = turnlog.stores.hide_credentials(args.store) if args.store else ""
    store = f"--store {shlex.quote(shown)} " if args.store else ""
    session = getattr(args, "session", None) or demo.DEFAULT_SESSION
    commands = [f"turnlog {store}{command.format(s=session)}" for command, _ in steps]
    width = max(len(c) for c in commands)
    print("try next:")
    for command, (_, what) in zip(commands, steps, strict=True):
        _say(f"  {command:<{width}}  {what}", "cyan")


@contextlib.contextmanager
def _progress(what: str, total: int, *, show: bool) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr while the block runs, on a terminal only; yields the
    function that advances it by one."""
    console = make_console(sys.stderr)
    if not show or not console.is_terminal:
        yield lambda: None
        return
    with ProgressBar(
        TextColumn(visible(what)),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=total)
        yield lambda: bar.advance(task)


# -- packing, replay, explain -----------------------------------------------------------------


def _policy_arg(
    args: argparse.Namespace, in_force: turnlog.Policy | None = None
) -> turnlog.Policy | None:
    """The policy ``--policy``/``--agent``/``--budget`` give (None: the one in force).

    ``--budget N`` without ``--policy`` keeps the rest of ``in_force`` (the session's
    policy in force, when the verb has a session), else of the defaults."""
    if getattr(args, "agent", None) and not getattr(args, "policy", None):
        raise _UsageError(
            f"--agent {args.agent} needs --policy FILE (the policy file whose "
            f"[agents.{args.agent}] table to apply)"
        )
    if getattr(args, "policy", None):
        try:
            policy = turnlog.Policy.from_toml(
                _read_bytes(args.policy, "policy file"), agent=args.agent
            )
        except turnlog.errors.PolicyError as exc:
            raise _UsageError(f"--policy {args.policy}: {exc}") from None
    else:
        policy = None
    budget = getattr(args, "budget", None)
    if budget is not None:
        base = policy or in_force or turnlog.Policy()
        fields = _unscaled(base)
        # The Policy's rule for a window: the output reserve is an eighth of it (at most
        # the default 16,000, `turnlog.Policy.scaled`); a reserve the policy sets is kept
        # up to that eighth.
        reserve = min(fields["output_reserve"], max(1, budget // 8))
        try:
            policy = turnlog.Policy(
                **{**fields, "context_window": budget, "output_reserve": reserve}
            )
        except turnlog.errors.PolicyError as exc:
            raise _UsageError(
                f"--budget {budget} is too small: {exc}; pass a larger --budget"
            ) from None
    return policy


def _unscaled(policy: turnlog.Policy) -> dict[str, Any]:
    """The fields of ``policy`` with those that hold a default scaled to its window
    (rules 3: the reserve, buffers, pruning and segment sizes, summary and recall caps;
    `turnlog.Policy.scaled`) put back to their absolute defaults, so that a policy
    made from them for another window scales them to that window. A field set to
    anything else is kept.

    A policy recorded under ``--budget 4000`` holds the defaults for 4,000 tokens; made
    afresh for ``--budget 128000`` from those, it kept a 1,000-token reserve and a
    642-token warning buffer, where a session without that history gets 16,000 and
    24,000. (A reserve set to exactly a quarter of the window reads as derived.)"""
    fields = {f: getattr(policy, f) for f in policy.__struct_fields__}
    if policy.resolved().rules < 3:
        return fields
    absolute = turnlog.Policy()

    def defaults(names: Iterable[str]) -> dict[str, Any]:
        return {n: getattr(absolute, n) for n in names}

    # The reserve first: the other fields scale with what it leaves usable. Derived, it
    # is the scaled default (an eighth of the window, which --budget gives too) or what
    # --budget of turnlog 0.3.0 made of the default (a quarter of the window).
    probe = turnlog.Policy(**{**fields, **defaults(["output_reserve"])}).resolved()
    derived = {probe.output_reserve, min(absolute.output_reserve, policy.context_window // 4)}
    if policy.output_reserve in derived:
        fields.update(defaults(["output_reserve"]))
    names = [
        n
        for n in fields
        if n not in ("context_window", "output_reserve", "rules")
        and isinstance(fields[n], int)
        and not isinstance(fields[n], bool)
        and fields[n] != getattr(absolute, n)
    ]
    # Scaled as they were: against the reserve the policy has.
    probe = turnlog.Policy(
        **{**fields, "output_reserve": policy.output_reserve, **defaults(names)}
    ).resolved()
    fields.update(defaults(n for n in names if getattr(probe, n) == fields[n]))
    return fields


def _session_model(log: turnlog.Log, session: str) -> str:
    """The session's most recent model ("" if none): the model named by the latest of its
    recorded requests, responses and assistant messages (an imported transcript names the
    model on each assistant message), through the sessions it forked from."""
    lineage = log.lineage(session)
    for event in reversed(lineage):
        body = event.body
        if isinstance(
            body,
            (
                turnlog.events.RequestIssued,
                turnlog.events.ResponseReceived,
                turnlog.events.AssistantMessageAdded,
            ),
        ) and _model_name(body.model):
            return body.model
    # An OpenAI request or response body imported as a transcript names its model once,
    # at the top (kept in the first event's meta, under "doc"), not on each message.
    for event in lineage:
        doc = event.meta.get("doc")
        model = doc.get("model") if isinstance(doc, dict) else None
        if isinstance(model, str) and _model_name(model):
            return model
    return ""


def _model_name(name: str) -> bool:
    # Claude Code writes "<synthetic>" on the messages it makes up itself (an API error
    # shown as a reply): not a model a request can name.
    return bool(name) and not name.startswith("<")


def _requests_erased(log: turnlog.Log, session: str) -> str:
    """Why a session has no request records left when they were erased (a clause
    naming how many and the erasure events), or "" when it never recorded one."""
    stubs = [
        e.body
        for e in log.read(session, kinds=["erased"])
        if isinstance(e.body, turnlog.events.EventErased) and e.body.kind == "request"
    ]
    if not stubs:
        return ""
    by = ", ".join(f"#{seq}" for seq in sorted({b.by for b in stubs}))
    return (
        f"its {_plural(len(stubs), 'recorded request')} "
        f"{'was' if len(stubs) == 1 else 'were'} erased (erasure event {by})"
    )


def _request_seq(log: turnlog.Log, replayer: Replayer, session: str, value: int) -> int:
    """A REQ_SEQ argument: a request's seq, or counted from the end (-1: the latest)."""
    if value >= 0:
        return value
    requests = replayer.requests(session)
    if not requests:
        if log.head(session) is None:
            raise turnlog.errors.UnknownSessionError(
                f"no session {session!r} in this log; list sessions with `turnlog sessions`"
            )
        erased = _requests_erased(log, session)
        raise turnlog.errors.UnknownSessionError(
            f"session {session!r} has no recorded request: {erased}"
            if erased
            else f"session {session!r} has no recorded request; record one with `turnlog "
            f"pack {session} --record`"
        )
    if -value > len(requests):
        raise _UsageError(
            f"request {value} is before the first: {session!r} has "
            f"{_plural(len(requests), 'recorded request')}"
        )
    return requests[value]


def _packed_json(packed: Packed, *, request_seq: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt": msgspec.to_builtins(packed.prompt),
        "prompt_hash": packed.prompt.hash,
        "tokens": packed.tokens,
        "message_tokens": list(packed.message_tokens),
        "section_tokens": list(packed.section_tokens),
        "budget": msgspec.to_builtins(packed.budget),
        "pressure": packed.pressure,
        "pressure_before": packed.pressure_before,
        "thresholds": list(packed.thresholds),
        "compaction_due": packed.compaction_due,
        "recovery": packed.recovery,
        "stages": [msgspec.to_builtins(s) for s in packed.stages],
        "tokenizer": packed.tokenizer,
        "policy_hash": packed.policy_hash,
    }
    if request_seq is not None:
        out["request_seq"] = request_seq
    return out


def _remove_store(path: Path, existed: bool) -> None:
    """Remove the files of a store that `_open` created but nothing was written to."""
    for name in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(OSError):
            (path / name).unlink()
    if not existed:
        with contextlib.suppress(OSError):
            path.rmdir()


class _Parser(argparse.ArgumentParser):
    """Flags are spelled in full: an abbreviation (``--j`` for ``--json``) is a usage
    error, so what a script asks for never changes when a verb gains a flag, and no
    abbreviated ``--json`` turns escaped human output into raw JSON unnoticed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None


def _at_most_seq(value: int) -> int:
    if value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"expected an integer up to 2**63 - 1, found {value}")
    return value


def _seq(text: str) -> int:
    """A seq argument: an integer no larger than a seq can be (negative counts from the
    end where the verb says so)."""
    return _at_most_seq(_integer(text))


def _nonneg(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, found {value}")
    return value


def _nonneg_seq(text: str) -> int:
    """A seq argument that does not count from the end."""
    return _at_most_seq(_nonneg(text))


def _positive(text: str) -> int:
    value = _nonneg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {value}")
    return value


#: The largest context window a policy takes (`turnlog.Policy` fields are at most 2**40).
_MAX_BUDGET = 2**40


def _budget(text: str) -> int:
    value = _nonneg(text)
    if value > _MAX_BUDGET:
        raise argparse.ArgumentTypeError(
            f"expected a context window of at most 2**40 ({_MAX_BUDGET:,}) tokens, found {value:,}"
        )
    return value


#: ``--budget`` or ``--policy``, and ``--agent``: how ``pack``, ``compact`` and ``recall``
#: take a policy (read by `_policy_arg`).
POLICY_OPTIONS = (
    one_of(
        arg(
            "--budget",
            type=_budget,
            metavar="N",
            help="context window in tokens (the rest of the policy in force, or the defaults)",
        ),
        arg("--policy", metavar="FILE", help="a policy TOML file"),
    ),
    arg("--agent", metavar="NAME", help="apply the [agents.NAME] table of the policy file"),
)
