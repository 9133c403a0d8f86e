"""Fuzz `Policy.from_toml` (and every ``[agents.NAME]`` override in the input).

Contract: a `Policy` or `PolicyError`, nothing else. A policy that loads is
usable everywhere a policy goes: its canonical bytes and hash are computed, it
survives ``to_builtins`` → `Policy.from_dict` and a msgpack round trip unchanged
(same hash), it can be recorded in a log as ``PolicySet`` and read back equal,
and its derived numbers as it packs (``usable``, threshold levels of the policy
resolved to its rules) are in range.

    python fuzz/fuzz_policy.py /tmp/work-policy fuzz/corpus/policy -max_total_time=600
"""

from __future__ import annotations

import sys
import tomllib

from _harness import instrumented, main

with instrumented(__name__ == "__main__"):
    import msgspec
    import turnlog
    from turnlog import Policy
    from turnlog.errors import PolicyError
    from turnlog.events import PolicySet


def _check(policy: Policy) -> None:
    digest = policy.hash
    again = Policy.from_dict(msgspec.to_builtins(policy))
    if again.hash != digest or again != policy:
        raise AssertionError("to_builtins -> from_dict changes the policy")
    decoded = msgspec.msgpack.decode(policy.encode(), type=Policy)
    if decoded.hash != digest:
        raise AssertionError("the canonical bytes do not decode to the same policy")
    # The numbers it packs with: a policy that leaves its rules unset is resolved to the
    # default rules (their defaults scaled to the window) when it is handed in.
    packing = policy.resolved()
    if not 0 < packing.usable <= packing.context_window:
        raise AssertionError(f"usable {packing.usable} out of range")
    for which in ("warning", "compact", "blocking"):
        level = packing.level(which)  # type: ignore[arg-type]
        if not 0 <= level <= packing.usable:
            raise AssertionError(f"{which} level {level} out of [0, {packing.usable}]")
    log = turnlog.open(":memory:")
    log.append("p", PolicySet(policy=policy))  # a loaded policy must be recordable
    stored = log.get("p", 0).body
    if not isinstance(stored, PolicySet) or stored.policy.hash != digest:
        raise AssertionError("a recorded policy reads back different")


def TestOneInput(data: bytes) -> None:
    try:
        policy = Policy.from_toml(data)
    except PolicyError:
        policy = None
    if policy is not None:
        _check(policy)
    try:
        agents = tomllib.loads(data.decode("utf-8")).get("agents")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    names = list(agents)[:4] if isinstance(agents, dict) else []
    for name in [*names, "no-such-agent"]:
        try:
            override = Policy.from_toml(data, agent=name)
        except PolicyError:
            continue
        _check(override)


if __name__ == "__main__":
    main(TestOneInput, "policy")
    sys.exit(0)
