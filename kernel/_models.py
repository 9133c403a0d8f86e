"""The model table: what a model name says about its budget and tokenizer.

Theory of operation
-------------------
A model name alone should be enough to pack for it. `ModelTable` maps names to a
`ModelInfo` (context window, output limit, tokenizer id, provider); the table
turnlog ships is data in the package (``models.toml``) and is read once.
A caller overrides or extends it with a table of its own (`ModelTable.merged`),
entry by entry: the caller's entry for a name replaces the shipped one whole.

Lookup is a pure function of the name and the table: the name is lower-cased, a
provider prefix (everything up to the last ``/``) is dropped, and the longest
table name that equals it or that it continues after a ``-`` wins
(``gpt-4o-2024-08-06`` is ``gpt-4o``, ``gpt-4o-mini-2024-07-18`` is
``gpt-4o-mini``, ``claude-sonnet-4-5-20250929`` is ``claude-sonnet-4-5``).

The table is read only where a policy is made for a model (`Policy.for_model`, a
session given a model and no policy): the policy that results is recorded in the
log like any other, so a later change to the table never changes what an old
request was packed with.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Annotated, Any

import msgspec

from ._errors import PolicyError
from ._validation import invalid

__all__ = ["ModelInfo", "ModelTable"]

_Tokens = Annotated[int, msgspec.Meta(ge=1, le=2**40)]


def load_toml(text: object, what: str, call: str) -> dict[str, Any]:
    """The TOML document ``text`` (a str, or UTF-8 bytes) that ``call`` was given, as a
    dict; a `PolicyError` naming ``what`` otherwise. A path, or a string that reads as a
    file name, is refused saying to pass the file's text."""
    hint = f"to load a file, pass its text: {call}(Path(path).read_text())"
    if not isinstance(text, (str, bytes)):
        invalid(
            "text", "TOML text (a str or bytes)", text, hint=hint, with_type=True, error=PolicyError
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PolicyError(f"{what} is not UTF-8: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        name = text.strip()
        if "\n" not in name and (name.lower().endswith(".toml") or "/" in name or "\\" in name):
            raise PolicyError(
                f"{what} is not valid TOML: {call} takes the TOML text, not a file name "
                f"({name[:80]!r}); {hint}"
            ) from exc
        raise PolicyError(f"{what} is not valid TOML: {exc}") from exc


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the model table knows of one model.

    Attributes:
        name: the table's name for it (the name a lookup matched).
        context_window: tokens of prompt and reply together.
        output_limit: the most tokens one reply may have.
        tokenizer: the tokenizer id its prompts are counted with (``o200k_base``,
            ``cl100k_base``, ``cl100k_base*RATIO``).
        provider: who serves it (``openai``, ``anthropic``...); informational.
    """

    name: str = ""
    context_window: _Tokens
    output_limit: _Tokens
    tokenizer: str
    provider: str = ""


class ModelTable:
    """Model names to `ModelInfo`; look names up with `lookup` or ``table[name]``.

    Parameters:
        entries: table name -> its info (names are lower-cased).
    """

    def __init__(self, entries: Mapping[str, ModelInfo]) -> None:
        self._entries = {
            name.lower(): msgspec.structs.replace(info, name=name.lower())
            for name, info in entries.items()
        }

    @classmethod
    def shipped(cls) -> ModelTable:
        """The table turnlog ships (``turnlog/models.toml``)."""
        if not _SHIPPED:
            text = (
                resources.files(__package__ or "turnlog")
                .joinpath("models.toml")
                .read_text(encoding="utf-8")
            )
            _SHIPPED.append(cls.from_toml(text))
        return _SHIPPED[0]

    @classmethod
    def from_toml(cls, text: str | bytes) -> ModelTable:
        """A table from TOML: one ``[models."NAME"]`` table per model with
        ``context_window``, ``output_limit``, ``tokenizer`` and optionally ``provider``.

        Raises:
            PolicyError: malformed TOML or an entry with a missing or bad field (the
                message names the model and the field).
        """
        raw = load_toml(text, "model table", "ModelTable.from_toml")
        models = raw.get("models", {})
        if not isinstance(models, dict) or set(raw) - {"models"}:
            raise PolicyError(
                'a model table holds only [models."NAME"] tables, found '
                f"top-level keys {sorted(raw)}"
            )
        entries: dict[str, ModelInfo] = {}
        for name, fields in models.items():
            try:
                entries[name] = msgspec.convert(fields, ModelInfo, strict=True)
            except msgspec.ValidationError as exc:
                raise PolicyError(
                    f"model table entry {name!r}: {exc}; an entry needs "
                    "context_window, output_limit and tokenizer"
                ) from exc
            if not entries[name].tokenizer:
                raise PolicyError(
                    f"model table entry {name!r}: tokenizer must name one, "
                    "e.g. 'o200k_base' or 'cl100k_base'"
                )
        return cls(entries)

    def merged(self, other: ModelTable | Mapping[str, ModelInfo]) -> ModelTable:
        """This table with ``other``'s entries added, replacing entries of the same name."""
        extra = other._entries if isinstance(other, ModelTable) else other
        return ModelTable({**self._entries, **extra})

    def names(self) -> list[str]:
        """The table's model names, sorted."""
        return sorted(self._entries)

    def lookup(self, model: str) -> ModelInfo | None:
        """The entry for a model name (see the module docstring), or None."""
        if not isinstance(model, str):
            return None
        name = model.strip().lower().rsplit("/", 1)[-1]
        found = self._entries.get(name)
        if found is not None:
            return found
        best: ModelInfo | None = None
        for candidate, info in self._entries.items():
            if name.startswith(candidate + "-") and (
                best is None or len(candidate) > len(best.name)
            ):
                best = info
        return best

    def __getitem__(self, model: str) -> ModelInfo:
        """The entry for a model name.

        Raises:
            PolicyError: the table has no entry for it; the message says what to pass.
        """
        found = self.lookup(model)
        if found is None:
            raise PolicyError(
                f"model {model!r} is not in the model table, so its context window, output "
                "limit and tokenizer are unknown; pass a policy that names them, e.g. "
                "Policy(context_window=128000, output_reserve=16000, tokenizer='cl100k_base'), "
                "or add the model: turnlog.packing.ModelTable.shipped().merged({name: ModelInfo("
                "context_window=..., output_limit=..., tokenizer=...)}) (see docs/policy.md)"
            )
        return found

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.lookup(model) is not None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<turnlog.packing.ModelTable {len(self._entries)} models>"


#: The shipped table, read once (a list so that no global statement is needed).
_SHIPPED: list[ModelTable] = []
