"""docs/policy.md: the policy TOML reference is generated from `Policy` and current,
describes every field, and its examples load."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import turnlog
from turnlog.tools import policydoc

DOC = Path(__file__).resolve().parents[1] / "docs" / "policy.md"


def test_the_reference_is_current() -> None:
    text = DOC.read_text()
    assert policydoc.replace(text) == text, (
        "docs/policy.md is out of date: run python -m turnlog.tools.policydoc --write "
        "docs/policy.md"
    )


def test_every_field_is_described_and_in_one_part() -> None:
    fields = set(typing.get_type_hints(turnlog.Policy))
    parted = [name for names in turnlog.packing.POLICY_PARTS.values() for name in names]
    assert sorted(parted) == sorted(fields)
    assert sorted(fields - set(policydoc.MEANINGS)) == [], "describe them in MEANINGS"
    assert set(policydoc.MEANINGS) <= fields and set(policydoc.SOURCES) <= fields


def test_the_documents_policy_files_load() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    example, *_, default = blocks
    assert turnlog.Policy.from_toml(default).hash == turnlog.Policy().hash
    policy = turnlog.Policy.from_toml(example)
    assert (policy.context_window, policy.output_reserve) == (32_000, 4_000)
    assert turnlog.Policy.from_toml(example, agent="small").context_window == 14_000
    maps = turnlog.Policy.from_toml("".join(blocks[1:3]))
    assert maps.hash == turnlog.Policy().hash  # the default maps, as printed
