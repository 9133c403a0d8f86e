"""Packing policy: every knob the packer and compactor read.

Theory of operation
-------------------
A policy is data. It lives in the log as a ``PolicySet`` event, so the policy
in force at any seq of a session is known from the log alone, and a request
record names it by hash. Two rules keep old records replayable:

* Defaults never change, and fields added in later versions get defaults
  that reproduce the old behaviour; fields are never renamed or removed.
  So a policy's canonical bytes omit the fields equal to their defaults (like
  every event), and adding a field changes neither the bytes of an old
  ``PolicySet`` event nor the hash that old request records name.
* ``tool_kinds`` and ``tool_weights`` are always written out (their defaults
  are built by a factory), so a later change to the built-in tool tables
  never changes what an old policy meant. No other factory defaults are
  allowed.

The fields fall into parts (`POLICY_PARTS`: budget, truncation, deduplication,
pruning, trimming, compaction, memories, recall, cache, prices, packing_rules),
and a policy file may write each part as a TOML table (``[budget]``,
``[truncation]``...) or every field at the top level. The stored form stays
flat: a ``PolicySet`` event's bytes and a policy's hash are permanent, and one
flat encoding keeps every old record meaning what it meant, so the parts are
a way to read and write policies, not a second encoding.

Thresholds follow the two conventions of the systems turnlog replaces: as a
*buffer* (fire when fewer than N tokens of the usable budget remain) or as a
*ratio* of the usable budget. When both are given the earlier trigger wins.
Defaults are the documented defaults of those systems (see docs/packing.md).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import blake3
import msgspec

from ._canonical import normalize
from ._errors import PolicyError
from ._models import ModelTable, load_toml
from ._validation import check_number, check_type, invalid

__all__ = ["POLICY_PARTS", "Policy"]

#: The newest packing rules version: rules 3, a cut that keeps the provider's cached
#: prefix and defaults scaled to the window.
RULES_LATEST = 3

#: What a policy with ``rules`` unset gets when it is handed in to pack or record (see
#: `Policy.resolved`): the newest rules.
RULES_DEFAULT = RULES_LATEST

#: The usable budget the absolute defaults were chosen for (128,000 - 16,000).
_DEFAULT_USABLE = 112_000

#: Fields whose default, under rules 3, is a share of the window: scaled in
#: proportion to the usable budget when it is below `_DEFAULT_USABLE`, never above
#: the absolute default (see `Policy.scaled`).
_SCALED = (
    "warning_buffer",
    "compact_buffer",
    "blocking_buffer",
    "prune_protect_tokens",
    "prune_min_savings",
    "segment_target_tokens",
    "segment_min_tokens",
)

NonNeg = Annotated[int, msgspec.Meta(ge=0, le=2**40)]
Ratio = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]

ToolKind = Literal[
    "file_read",
    "file_edit",
    "file_write",
    "grep",
    "glob",
    "bash",
    "shell_read",
    "web_fetch",
    "web_search",
    "other",
]

#: Points at which the memory block of a session may be re-rendered (see
#: ``memories.MemoryManager.refresh``).
RefreshPoint = Literal["session_start", "compaction", "every_turn", "manual"]
REFRESH_POINTS: tuple[str, ...] = ("session_start", "compaction", "every_turn", "manual")

# Tool name -> kind. Names seen in real transcripts (Claude Code, Codex,
# SWE-agent, OpenHands, mini-swe-agent) and the generic names of the docs.
DEFAULT_TOOL_KINDS: dict[str, str] = {
    "Read": "file_read",
    "read_file": "file_read",
    "file_read": "file_read",
    "view": "file_read",
    "read": "file_read",
    "open": "file_read",
    "cat": "file_read",
    "Edit": "file_edit",
    "MultiEdit": "file_edit",
    "file_edit": "file_edit",
    "edit": "file_edit",
    "str_replace_editor": "file_edit",
    "apply_patch": "file_edit",
    "str_replace_based_edit_tool": "file_edit",
    "NotebookEdit": "file_edit",
    "Write": "file_write",
    "file_write": "file_write",
    "write_file": "file_write",
    "create": "file_write",
    "Grep": "grep",
    "grep": "grep",
    "search_file": "grep",
    "search_dir": "grep",
    "Glob": "glob",
    "glob": "glob",
    "LS": "glob",
    "find_file": "glob",
    "ls": "glob",
    "Bash": "bash",
    "bash": "bash",
    "shell": "bash",
    "shell_command": "bash",
    "run": "bash",
    "execute_bash": "bash",
    "exec": "bash",
    "BashOutput": "shell_read",
    "shell_read": "shell_read",
    "WebFetch": "web_fetch",
    "web_fetch": "web_fetch",
    "browse": "web_fetch",
    "WebSearch": "web_search",
    "web_search": "web_search",
}

# Pruning weights by kind: higher is pruned first (seed 003's table).
DEFAULT_TOOL_WEIGHTS: dict[str, int] = {
    "bash": 70,
    "shell_read": 65,
    "web_fetch": 55,
    "grep": 50,
    "web_search": 40,
    "file_read": 30,
    "file_edit": 20,
    "file_write": 20,
    "glob": 10,
    "other": 50,
}


#: The parts of a policy, in order: part name -> its fields. Each field belongs to exactly
#: one part; a policy file may give a part as a TOML table (``[truncation]``).
POLICY_PARTS: dict[str, tuple[str, ...]] = {
    "budget": (
        "context_window",
        "output_reserve",
        "safety_margin",
        "warning_buffer",
        "warning_ratio",
        "compact_buffer",
        "compact_ratio",
        "blocking_buffer",
        "blocking_ratio",
        "tokenizer",
    ),
    "truncation": ("truncate", "truncate_lines", "truncate_bytes", "truncate_head_ratio"),
    "deduplication": ("dedup",),
    "pruning": (
        "prune",
        "prune_protect_turns",
        "prune_protect_tokens",
        "prune_min_savings",
        "prune_reference_bonus",
        "prune_decision_bonus",
        "tool_kinds",
        "tool_weights",
    ),
    "trimming": ("trim", "trim_low_ratio"),
    "compaction": (
        "summary_budget",
        "summary_max_tokens",
        "auto_compact",
        "compact_cooldown_turns",
        "compact_every_turns",
        "compact_every_tool_calls",
        "compact_max_failures",
        "keep_recent_turns",
        "keep_recent_messages",
        "summary_model",
        "segment_target_tokens",
        "segment_min_tokens",
        "segment_min_messages",
        "rollup_fanout",
    ),
    "memories": (
        "memory_max_count",
        "memory_max_chars",
        "memory_working_max",
        "memory_summary_keep",
        "memory_refresh",
    ),
    "recall": ("recall_max_chars", "recall_max_tokens"),
    "cache": ("cache_breakpoints", "cache_horizon_turns"),
    "prices": ("cache_write_price", "cache_read_price", "input_price"),
    "packing_rules": ("rules", "tail_steps", "clip_ratio", "tool_clip_ratio", "summary_gate"),
}


class _PolicyMeta(msgspec.StructMeta):
    """Checks the keyword arguments of ``Policy(...)`` as `Policy.from_dict` checks a
    mapping: msgspec's own ``__init__`` raises a bare ``TypeError`` for an unknown
    field and checks neither types nor ranges. Decoding and `msgspec.convert` do not
    pass through here, and the policy is built from the arguments exactly as given, so
    its bytes and hash are what they were."""

    def __call__(cls, *args: Any, **fields: Any) -> Any:
        if args:
            raise PolicyError(
                f"Policy takes its fields as keyword arguments, found {len(args)} "
                f"positional argument{'s' if len(args) != 1 else ''}; write "
                "Policy(context_window=N, ...) (see docs/policy.md for every field)"
            )
        for key in fields:
            if key not in cls.__struct_fields__:
                raise PolicyError(_unknown_argument(key))
        _refuse_nonfinite(fields)
        try:
            msgspec.convert(fields, cls, strict=True)
        except msgspec.ValidationError as exc:
            raise PolicyError(_invalid(str(exc), fields)) from None
        return super().__call__(**fields)


class Policy(
    msgspec.Struct,
    metaclass=_PolicyMeta,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    """Everything packing and compaction may depend on.

    Load one with `Policy.from_toml`, or construct it with keyword arguments;
    every field has a default. Record it in a session with a ``PolicySet``
    event (recording a request does that for you when needed).

    Packing rules: ``rules`` defaults to 0, *unset*. A policy handed in by the
    caller (to `pack`, `Packer.pack` and `Replayer.record`, the `Compactor`, a
    session, the CLI) with rules unset is packed and recorded as `resolved`:
    with the newest rules (3), written out explicitly in its ``PolicySet``. A
    policy read back from the log with rules unset (every ``PolicySet`` written
    by turnlog 0.1.0, which had no such field) means rules 1, so old requests
    replay byte for byte and an old session keeps its rules until a new policy
    is handed in. Append a ``PolicySet`` by hand with ``policy.resolved()`` (or
    an explicit ``rules``) to get the same meaning.
    """

    # -- budget -------------------------------------------------------------
    context_window: NonNeg = 128_000
    output_reserve: NonNeg = 16_000
    safety_margin: NonNeg = 0
    warning_buffer: NonNeg | None = 24_000
    warning_ratio: Ratio | None = None
    compact_buffer: NonNeg | None = 12_000
    compact_ratio: Ratio | None = None
    blocking_buffer: NonNeg | None = 3_000
    blocking_ratio: Ratio | None = None
    keep_recent_turns: NonNeg = 3
    keep_recent_messages: NonNeg = 10
    tokenizer: str = "cl100k_base"
    # -- tool-output truncation ----------------------------------------------
    truncate: bool = True
    truncate_lines: Annotated[int, msgspec.Meta(ge=2, le=2**31)] = 2_000
    truncate_bytes: Annotated[int, msgspec.Meta(ge=64, le=2**31)] = 50_000
    truncate_head_ratio: Ratio = 0.6
    # -- dedup ---------------------------------------------------------------
    dedup: bool = True
    # -- pruning -------------------------------------------------------------
    prune: bool = True
    prune_protect_turns: NonNeg = 2
    prune_protect_tokens: NonNeg = 40_000
    prune_min_savings: NonNeg = 20_000
    prune_reference_bonus: NonNeg = 15
    prune_decision_bonus: NonNeg = 10
    tool_kinds: dict[str, str] = msgspec.field(default_factory=lambda: dict(DEFAULT_TOOL_KINDS))
    tool_weights: dict[str, int] = msgspec.field(default_factory=lambda: dict(DEFAULT_TOOL_WEIGHTS))
    # -- trimming ------------------------------------------------------------
    trim: bool = True
    #: Rules 3: when the kept history passes the blocking level, trimming cuts it down
    #: to this share of the blocking level (the low watermark), so the next requests
    #: only append to the prompt until it passes the blocking level again.
    trim_low_ratio: Ratio = 0.8
    # -- summaries and compaction ---------------------------------------------
    summary_budget: Ratio = 0.75
    summary_max_tokens: NonNeg = 1_024
    auto_compact: bool = True
    compact_cooldown_turns: NonNeg = 1
    compact_every_turns: NonNeg = 0
    compact_every_tool_calls: NonNeg = 0
    compact_max_failures: NonNeg = 3
    #: Informational: the model a model summarizer should use (``turnlog.adapters``'
    #: summarizers take their model as an argument; the kernel never calls a model).
    summary_model: str = ""
    segment_target_tokens: NonNeg = 15_000
    segment_min_tokens: NonNeg = 5_000
    segment_min_messages: NonNeg = 10
    rollup_fanout: Annotated[int, msgspec.Meta(ge=2, le=1000)] = 10
    # -- memories and recall ---------------------------------------------------
    memory_max_count: NonNeg = 6
    memory_max_chars: NonNeg = 4_000
    memory_working_max: NonNeg = 5
    memory_summary_keep: NonNeg = 10
    memory_refresh: tuple[RefreshPoint, ...] = ("session_start", "compaction", "manual")
    recall_max_chars: NonNeg = 4_000
    recall_max_tokens: NonNeg = 2_000
    # -- prompt cache ----------------------------------------------------------
    cache_breakpoints: Annotated[int, msgspec.Meta(ge=0, le=64)] = 4
    cache_write_price: float = 3.75
    cache_read_price: float = 0.30
    #: Informational: the price of uncached input per million tokens, beside the cache
    #: prices the compaction cost model reads; kept for reports and cost estimates.
    input_price: float = 3.0
    cache_horizon_turns: NonNeg = 10
    # -- packing rules (fields added after 0.1.0: absent from old records) -----------
    #: The packing rules version; 0 means *unset*. 1 is turnlog 0.1.0's: the whole
    #: current turn is the mandatory tail, nothing is clipped, call ids go out as
    #: logged, committed summaries always replace their events. 2: the tail is the
    #: latest user message plus the last ``tail_steps`` steps, oversized texts are
    #: clipped, call ids are made unique in the prompt, summaries are a packing choice
    #: gated by ``summary_gate``, and trimmed runs leave a marker (see docs/packing.md).
    #: A *stored* policy with rules unset (every 0.1.0 ``PolicySet``) means rules 1; a
    #: policy handed to `pack`, `Packer.pack`/`record`, the `Compactor` or a session
    #: with rules unset is resolved to `RULES_DEFAULT` first (`resolved`), so what gets
    #: recorded names its rules explicitly.
    #: 3 (the default): the prefix is kept: trimming cuts down to ``trim_low_ratio`` of
    #: the blocking level at turn or step boundaries, with hysteresis, and only when the
    #: blocking level is passed; dedup and pruning act only in a recovery pack, and a
    #: placeholder is never larger than what it replaces; the budget fields left at
    #: their defaults scale with the window (`scaled`).
    rules: Annotated[int, msgspec.Meta(ge=0, le=3)] = 0
    tail_steps: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 4
    clip_ratio: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.25
    #: Rules 2 and up: the share of the history budget one tool result, or one tool
    #: call's arguments, may take (at least 256 tokens, or ``clip_ratio``'s limit if
    #: that is lower); unset, they share ``clip_ratio`` with every other text. A
    #: smaller share keeps the prompt's new tokens few, so more of each request is a
    #: cached prefix; the model reads the rest with the ``read_output`` tool.
    tool_clip_ratio: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    summary_gate: Ratio = 0.72

    def __post_init__(self) -> None:
        if self.rules >= 3:
            for name, value in self.scaled().items():
                msgspec.structs.force_setattr(self, name, value)
        for name in (
            "warning_ratio",
            "compact_ratio",
            "blocking_ratio",
            "truncate_head_ratio",
            "summary_budget",
            "cache_write_price",
            "cache_read_price",
            "input_price",
            "clip_ratio",
            "tool_clip_ratio",
            "summary_gate",
        ):
            check_number(
                getattr(self, name),
                f"policy field {name!r}",
                min_value=0,
                optional=True,
                error=PolicyError,
            )
        reserve = self.output_reserve
        if self.rules == 0 and RULES_DEFAULT >= 3:  # handed in: packs as resolved, scaled
            reserve = self.scaled().get("output_reserve", reserve)
        if reserve + self.safety_margin >= self.context_window:
            raise PolicyError(
                f"output_reserve ({self.output_reserve}) + safety_margin "
                f"({self.safety_margin}) must be below context_window ({self.context_window}); "
                "raise context_window or lower the reserve"
            )
        if not isinstance(self.memory_refresh, tuple) or any(
            point not in REFRESH_POINTS for point in self.memory_refresh
        ):
            raise PolicyError(
                f"policy field 'memory_refresh' must be a tuple of points out of "
                f"{list(REFRESH_POINTS)}, found {self.memory_refresh!r}"
            )
        if not self.tokenizer:
            raise PolicyError("policy field 'tokenizer' must name an encoding, e.g. 'cl100k_base'")

    def scaled(self) -> dict[str, int]:
        """The defaults that scale with the window (rules 3), for the fields this policy
        leaves at their absolute defaults: ``output_reserve`` is an eighth of the window,
        at most 16,000; the warning, compaction and blocking buffers, the pruning
        protection and minimum savings and the segment sizes shrink in proportion to the
        usable budget below 112,000 (the figures at 128,000 and up are the absolute
        defaults); ``summary_max_tokens`` and ``recall_max_tokens`` are at most an
        eighth of the usable budget. A field set to anything but its absolute default is
        kept as given (one set *to* the absolute default is read as left at it)."""
        fields = Policy.__struct_defaults__
        names = Policy.__struct_fields__
        default = dict(zip(names[len(names) - len(fields) :], fields, strict=True))
        out: dict[str, int] = {}
        reserve = self.output_reserve
        if reserve == default["output_reserve"]:
            reserve = max(1, min(reserve, self.context_window // 8))
            if reserve != self.output_reserve:
                out["output_reserve"] = reserve
        usable = max(1, self.context_window - reserve - self.safety_margin)
        if usable < _DEFAULT_USABLE:
            for name in _SCALED:
                value = getattr(self, name)
                if value is not None and value == default[name]:
                    out[name] = value * usable // _DEFAULT_USABLE
            for name in ("summary_max_tokens", "recall_max_tokens"):
                value = getattr(self, name)
                if value == default[name] and usable // 8 < value:
                    out[name] = max(1, usable // 8)
        return out

    # -- made for a model -------------------------------------------------------------
    @classmethod
    def for_model(cls, model: str, *, models: ModelTable | None = None, **fields: Any) -> Policy:
        """The default policy sized for a model of the model table.

        ``context_window`` and ``tokenizer`` are the model's; ``output_reserve`` is
        its output limit, at most a quarter of the window and at most 32,000; when
        the usable budget is smaller than the default one (112,000), the warning,
        compaction and blocking buffers shrink in the same proportion. Fields given
        as keyword arguments win over all of these.

        Parameters:
            model: the model name (see `ModelTable.lookup` for how it matches).
            models: the table to look it up in (the shipped one when None).
            fields: policy fields to set explicitly.

        Raises:
            PolicyError: the model is not in the table (the message says what to
                pass instead), or a field is invalid.
        """
        info = (models if models is not None else ModelTable.shipped())[model]
        window = info.context_window
        reserve = max(1, min(info.output_limit, window // 4, 32_000))
        derived: dict[str, Any] = {
            "context_window": window,
            "output_reserve": reserve,
            "tokenizer": info.tokenizer,
        }
        default = cls()
        usable = window - reserve
        if usable < default.usable:
            for name in ("warning_buffer", "compact_buffer", "blocking_buffer"):
                buffer = getattr(default, name)
                assert buffer is not None
                derived[name] = buffer * usable // default.usable
        return cls.from_dict({**derived, **fields})

    # -- derived -----------------------------------------------------------------
    @property
    def rules_version(self) -> int:
        """The packing rules this policy packs with as stored: ``rules``, or 1 when it is
        unset (a policy recorded by turnlog 0.1.0, which had no rules field)."""
        return self.rules or 1

    def resolved(self) -> Policy:
        """This policy with ``rules`` set: unchanged when it names its rules, else with
        ``rules=RULES_DEFAULT`` (3, with the defaults scaled to the window). The kernel
        resolves every policy a caller hands in before packing or recording it, so a
        new session gets the default rules while a stored 0.1.0 policy (rules unset)
        keeps meaning rules 1 and a stored rules 2 policy keeps rules 2."""
        if self.rules:
            return self
        return msgspec.structs.replace(self, rules=RULES_DEFAULT)  # runs __post_init__

    @property
    def usable(self) -> int:
        """Tokens available for the whole prompt (window - output reserve - margin)."""
        return self.context_window - self.output_reserve - self.safety_margin

    def level(self, which: Literal["warning", "compact", "blocking"]) -> int:
        """Used-token level at which a threshold fires (clamped to ``[0, usable]``)."""
        usable = self.usable
        buffer: int | None = getattr(self, f"{which}_buffer")
        ratio: float | None = getattr(self, f"{which}_ratio")
        candidates: list[int] = []
        if buffer is not None:
            candidates.append(usable - buffer)
        if ratio is not None:
            candidates.append(int(usable * ratio))
        if not candidates:
            return usable
        return max(0, min(usable, *candidates))

    def kind_of(self, tool_name: str) -> str:
        """The tool kind (``file_read``, ``bash``...) of a tool name; ``other`` if unknown."""
        return tool_kind(self.tool_kinds, tool_name)

    def encode(self) -> bytes:
        """Canonical bytes: msgpack, fields equal to their defaults omitted, map keys
        sorted."""
        normalize(self)
        return _ENCODER.encode(self)

    @property
    def hash(self) -> str:
        """``blake3`` hex digest of `encode`; names the policy in request records."""
        return blake3.blake3(self.encode()).hexdigest()

    @classmethod
    def from_toml(cls, text: str | bytes, *, agent: str | None = None) -> Policy:
        """Load a policy from TOML text.

        Keys are policy fields, at the top level or inside the table of their
        part (``[budget]``, ``[truncation]``..., see `POLICY_PARTS`). A table
        ``[agents.NAME]`` (with the same layout) overrides fields for one agent;
        pass ``agent=NAME`` to apply it.

        Raises:
            PolicyError: malformed TOML, an unknown field, a wrong type or an
                out-of-range value (the message names the field).
        """
        raw = load_toml(text, "policy", "Policy.from_toml")
        agents = raw.pop("agents", {})
        check_type(
            agents,
            dict,
            "policy key 'agents'",
            what="a table of per-agent tables",
            error=PolicyError,
        )
        raw = _flatten(raw, "")
        if agent is not None:
            override = agents.get(agent)
            if override is None:
                raise PolicyError(
                    f"policy has no [agents.{agent}] table; known agents: "
                    f"{sorted(agents) or 'none'}"
                )
            check_type(override, dict, f"[agents.{agent}]", what="a table", error=PolicyError)
            raw = {**raw, **_flatten(override, f"agents.{agent}.")}
        return cls.from_dict(raw)

    def parts(self) -> dict[str, dict[str, Any]]:
        """The policy's fields by part (`POLICY_PARTS`), every field with its value;
        the layout `from_toml` reads as tables."""
        return {
            part: {name: getattr(self, name) for name in names}
            for part, names in POLICY_PARTS.items()
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Policy:
        """Build a policy from a plain mapping, validating every field.

        Raises:
            PolicyError: an unknown field or table (with the closest known name and the
                tables a policy file may have), a wrong type or an out-of-range value
                (naming the field, what was expected and what was found).
        """
        if isinstance(raw, dict):
            for key, value in raw.items():
                if key not in cls.__struct_fields__:
                    raise PolicyError(_unknown(str(key), value))
            _refuse_nonfinite(raw)
        try:
            return msgspec.convert(raw, cls, strict=True)
        except msgspec.ValidationError as exc:
            raise PolicyError(_invalid(str(exc), raw)) from exc


_ENCODER = msgspec.msgpack.Encoder(order="deterministic")


def check_policy(policy: object, name: str = "policy") -> None:
    """``policy`` is None or a `Policy`; else an `InvalidArgumentError` saying how to
    make one (a mapping of fields failed later with "no attribute 'resolved'")."""
    if policy is None or isinstance(policy, Policy):
        return
    hint = (
        "make one of the mapping: turnlog.Policy(**fields) or Policy.from_dict(fields)"
        if isinstance(policy, Mapping)
        else "make one: turnlog.Policy(context_window=N, ...) (docs/policy.md)"
    )
    invalid(name, "None or a turnlog.Policy", policy, hint=hint, with_type=True)


def tool_kind(kinds: Mapping[str, str], tool_name: str) -> str:
    """The kind ``kinds`` gives a tool name (exact, else lower case); ``other`` if none."""
    kind = kinds.get(tool_name)
    if kind is None and tool_name.lower() != tool_name:
        kind = kinds.get(tool_name.lower())
    return kind or "other"


#: The tables a policy file may have, for error messages.
_TABLES = ", ".join([*(f"[{part}]" for part in POLICY_PARTS), "[agents.NAME]"])

#: What msgspec calls a type, as a policy file's reader would say it.
_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "array": "an array",
    "object": "a table",
    "null": "nothing",
}

_EXPECTED = re.compile(r"^Expected `([^`]+)`, got `([^`]+)` - at `\$\.([A-Za-z_]\w*)")
_AT = re.compile(r" - at `\$\.([A-Za-z_]\w*)([^`]*)`$")


def _did_you_mean(name: str, choices: tuple[str, ...] | list[str], otherwise: str) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else otherwise


def _unknown(key: str, value: object) -> str:
    """The message for a key that is no policy field: an unknown table or field."""
    if isinstance(value, dict):
        close = difflib.get_close_matches(key, [*POLICY_PARTS, "agents"], n=1, cutoff=0.6)
        hint = f"did you mean [{close[0]}]? " if close else ""
        return (
            f"unknown policy table [{key}]; {hint}the tables are {_TABLES} (or every "
            "field at the top level)"
        )
    fields = sorted(f for names in POLICY_PARTS.values() for f in names)
    close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    home = next((p for p, names in POLICY_PARTS.items() if close and close[0] in names), "")
    hint = f"did you mean '{close[0]}' (in [{home}])? " if close else ""
    return (
        f"unknown policy field '{key}'; {hint}fields go at the top level or in the "
        f"table of their part: {_TABLES}; see docs/policy.md for every field"
    )


def _unknown_argument(key: str) -> str:
    """The message for a keyword argument of ``Policy(...)`` that is no policy field:
    the closest field, then every field by part."""
    fields = [f for names in POLICY_PARTS.values() for f in names]
    close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    listing = "; ".join(f"{part}: {', '.join(names)}" for part, names in POLICY_PARTS.items())
    return f"Policy has no field '{key}'; {hint}the fields are ({listing})"


def _short(value: object) -> str:
    """A value as an error message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse_nonfinite(fields: Mapping[str, Any]) -> None:
    """NaN and infinity are named as such: msgspec's range check would call a NaN ratio
    merely out of range, and a NaN compares false with every bound downstream."""
    for key, value in fields.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise PolicyError(
                f"invalid policy: {key} must be a finite number, found {value!r}; "
                "see docs/policy.md for its range"
            )


def _invalid(message: str, raw: object) -> str:
    """msgspec's validation message as a policy file's reader needs it: the field, what
    is expected there and what was found."""
    expected = _EXPECTED.match(message)
    if expected and isinstance(raw, dict):
        want, got, field = expected.groups()
        found = raw.get(field)
        shown = (
            f"the string {_short(found)}"
            if isinstance(found, str)
            else (
                f"{_TYPE_WORDS.get(got, got)} ({_short(found)})"
                if not isinstance(found, dict)
                else "a table"
            )
        )
        hint = ""
        if (
            want == "int"
            and isinstance(found, str)
            and re.fullmatch(r"\s*\d{1,9}(\.\d{1,6})?\s*[kKmM]\s*", found)
        ):
            scale = 1_000 if found.strip()[-1] in "kK" else 1_000_000
            hint = f" (write {round(float(found.strip()[:-1]) * scale)}, without quotes)"
        return (
            f"invalid policy: {_TYPE_WORDS.get(want, want)} is expected at "
            f"{field}, found {shown}{hint}"
        )
    at = _AT.search(message)
    if at:
        field, rest = at.group(1), at.group(2)
        head = re.sub(
            r"^Expected `([^`]+)`", lambda m: _TYPE_WORDS.get(m[1], m[1]), message[: at.start()]
        )
        found = raw.get(field) if isinstance(raw, dict) and not rest else None
        shown = (
            f", found {_short(found)}"
            if found is not None and not isinstance(found, (dict, list))
            else ""
        )
        return f"invalid policy: {head} is expected at {field}{rest}{shown}"
    return f"invalid policy: {message}"


def _flatten(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Policy keys with the tables of parts (``[budget]``...) merged into the top level.

    Raises:
        PolicyError: a part that is not a table, a field inside the wrong part, or a
            field given twice (at the top level and in its part).
    """
    flat = {key: value for key, value in raw.items() if key not in POLICY_PARTS}
    for part, names in POLICY_PARTS.items():
        table = raw.get(part)
        if table is None:
            continue
        check_type(
            table,
            dict,
            f"policy key '{where}{part}'",
            what=f"a table of {part} fields",
            error=PolicyError,
        )
        for key, value in table.items():
            if key not in names:
                home = next((p for p, fields in POLICY_PARTS.items() if key in fields), None)
                hint = (
                    f"; it belongs in [{home}]"
                    if home
                    else _did_you_mean(
                        str(key), names, f"; the {part} fields are {', '.join(names)}"
                    )
                )
                raise PolicyError(f"policy field '{key}' is not a {part} field{hint}")
            if key in flat:
                raise PolicyError(
                    f"policy field '{key}' is given twice: at the top level "
                    f"and in [{where}{part}]; keep one"
                )
            flat[key] = value
    return flat
