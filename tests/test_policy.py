"""Policy: parts, policy files and the permanence of the stored form."""

from __future__ import annotations

import msgspec
import pytest
import turnlog
from turnlog import Policy
from turnlog.errors import PolicyError
from turnlog.packing import POLICY_PARTS


def test_every_field_belongs_to_exactly_one_part() -> None:
    listed = [name for names in POLICY_PARTS.values() for name in names]
    assert sorted(listed) == sorted(Policy.__struct_fields__)
    assert len(listed) == len(set(listed))


def test_no_part_is_named_like_a_field() -> None:
    assert set(POLICY_PARTS).isdisjoint(Policy.__struct_fields__)


def test_a_policy_file_may_group_fields_by_part() -> None:
    grouped = Policy.from_toml("""
[budget]
context_window = 32000
output_reserve = 4000
[truncation]
truncate_lines = 500
[agents.fast.budget]
context_window = 16000
""")
    flat = Policy.from_toml("context_window = 32000\noutput_reserve = 4000\ntruncate_lines = 500\n")
    assert grouped == flat
    assert grouped.hash == flat.hash
    fast = Policy.from_toml(
        "[budget]\ncontext_window = 32000\noutput_reserve = 4000\n"
        "[agents.fast.budget]\ncontext_window = 16000\n",
        agent="fast",
    )
    assert fast.context_window == 16_000
    assert fast.output_reserve == 4_000


def test_parts_round_trip_through_a_policy_file() -> None:
    policy = Policy(context_window=50_000, truncate_lines=300, prune=False)
    parts = policy.parts()
    assert list(parts) == list(POLICY_PARTS)
    assert Policy.from_dict({k: v for part in parts.values() for k, v in part.items()}) == policy


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[budget]\ntruncate_lines = 5\n", "belongs in [truncation]"),
        ("budget = 3\n", "must be a table"),
        ("context_window = 9000\n[budget]\ncontext_window = 9000\n", "given twice"),
        ("[budget]\nno_such_field = 1\n", "not a budget field"),
    ],
)
def test_a_misplaced_field_is_a_policy_error_naming_it(text: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words.replace("[", r"\[")):
        Policy.from_toml(text)


def test_the_stored_form_stays_flat() -> None:
    # A PolicySet's bytes and a policy's hash are permanent: the parts change neither.
    policy = Policy(context_window=32_000, output_reserve=4_000, truncate_lines=500)
    decoded = msgspec.msgpack.decode(policy.encode())
    assert isinstance(decoded, dict)
    assert set(decoded) <= set(Policy.__struct_fields__)
    assert not set(decoded) & set(POLICY_PARTS)
    assert turnlog.Policy.from_dict(decoded) == policy


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "context_windw = 32000\n",
            "unknown policy field 'context_windw'; did you mean 'context_window' (in [budget])?",
        ),
        (
            "[budgt]\ncontext_window = 32000\n",
            "unknown policy table [budgt]; did you mean "
            "[budget]? the tables are [budget], [truncation]",
        ),
        ("[budget]\ncontext_windw = 32000\n", "not a budget field; did you mean 'context_window'?"),
        ("[agents.small]\ncontext_windw = 8000\n", "did you mean 'context_window'"),
        (
            'context_window = "32k"\n',
            "an integer is expected at context_window, found the "
            "string '32k' (write 32000, without quotes)",
        ),
        ('truncate = "yes"\n', "true or false is expected at truncate, found the string 'yes'"),
        ("context_window = -5\n", "an integer >= 0 is expected at context_window, found -5"),
        (
            "zzz = 1\n",
            "unknown policy field 'zzz'; fields go at the top level or in the table of "
            "their part: [budget]",
        ),
        (
            f'context_window = "{"9" * 400}k"\n',
            "an integer is expected at context_window, found the string '999999999",
        ),
    ],
)
def test_a_policy_file_mistake_names_the_field_and_what_to_write(text: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml(text, agent="small" if "agents" in text else None)
    assert words in str(caught.value)
    assert (
        "[agents.NAME]" in str(caught.value)
        or "expected" in str(caught.value)
        or "did you mean" in str(caught.value)
    )
