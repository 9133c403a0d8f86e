"""The public surface: a short top level for the main path, public submodules for the
rest, implementation modules private, and every module's ``__all__`` sorted and listing
exactly what it means to export. Names the package exported in 0.2.0 and now exports
from a submodule (or no longer exports) still resolve, with a `DeprecationWarning`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from types import ModuleType

import pytest
import turnlog
import turnlog.adapters

#: The kernel's public modules besides the package itself.
PUBLIC_KERNEL_MODULES = {
    "compaction",
    "errors",
    "events",
    "log",
    "memories",
    "packing",
    "replay",
    "stores",
    "testing",
    "tracing",
    "validation",
}

#: The submodules whose every name is re-exported from a private module.
REEXPORTING_MODULES = sorted(PUBLIC_KERNEL_MODULES - {"testing"})

#: The top level: the main path and nothing else.
TOP_LEVEL = [
    "Compactor",
    "Draft",
    "KernelError",
    "Log",
    "Packer",
    "Policy",
    "Replayer",
    "open",
    "pack",
]

#: Every name ``turnlog.__all__`` listed in 0.2.0.
RELEASED_0_2_0 = {
    "AppendConflictError",
    "Appended",
    "AssistantMessageAdded",
    "BlobNotFoundError",
    "BlobRef",
    "Body",
    "Breakpoint",
    "Budget",
    "BudgetExceededError",
    "Checkpoint",
    "CompactionCommitted",
    "CompactionError",
    "CompactionFailed",
    "Compactor",
    "Copied",
    "CostEstimate",
    "DECISIONS",
    "DEFAULT_STAGES",
    "Decision",
    "DecisionChange",
    "DecodeError",
    "Draft",
    "EVENT_KINDS",
    "Embedder",
    "Event",
    "EventTooLargeError",
    "EventsPinned",
    "ExtractiveSummarizer",
    "ForkedProcessError",
    "GENESIS",
    "Head",
    "IdempotencyError",
    "ImagePart",
    "ImportFormatError",
    "InvalidArgumentError",
    "InvalidEventError",
    "Item",
    "KernelError",
    "LMDBStore",
    "Log",
    "MEMORY_SECTION",
    "Memory",
    "MemoryBook",
    "MemoryChanged",
    "MemoryManager",
    "MemoryStore",
    "Message",
    "NEW_SESSION",
    "NotificationAdded",
    "Outcome",
    "POLICY_PARTS",
    "PackError",
    "PackIndex",
    "PackState",
    "Packed",
    "Packer",
    "Part",
    "Policy",
    "PolicyError",
    "PolicySet",
    "PostgresStore",
    "Problem",
    "Projection",
    "Prompt",
    "ProviderErrorReceived",
    "ReadTxn",
    "ReasoningPart",
    "RecallAdded",
    "RecallHit",
    "Recaller",
    "Recorded",
    "Renderer",
    "ReplayMismatchError",
    "ReplayResult",
    "RequestDiff",
    "RequestIssued",
    "ResponseReceived",
    "SUMMARY_SECTION",
    "Section",
    "SessionForked",
    "SessionRewound",
    "Snapshot",
    "Stage",
    "StageReport",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreReadOnlyError",
    "StoreUnavailableError",
    "Summarizer",
    "Summary",
    "SummaryRequest",
    "SystemSectionSet",
    "TextPart",
    "TokenCounter",
    "TokenizerError",
    "ToolCall",
    "ToolResultAdded",
    "ToolSpec",
    "ToolsSet",
    "Unit",
    "UnknownSessionError",
    "Usage",
    "UserMessageAdded",
    "VerificationError",
    "VerifyReport",
    "WriteTxn",
    "backoff",
    "copy_log",
    "covered_digest",
    "event_from_json",
    "event_to_json",
    "get_counter",
    "notification_text",
    "open",
    "pack",
    "recall_text",
}

#: Engine parts that left the public surface: the old path resolves to this module's name.
INTERNAL = {
    "Item": "turnlog._projection",
    "PackIndex": "turnlog._pack._index",
    "Unit": "turnlog._projection",
}

KERNEL_MODULES = sorted(
    info.name
    for info in pkgutil.iter_modules(turnlog.__path__)
    if info.name not in ("adapters", "tools")
)
PRIVATE_MODULES = sorted(
    info.name.removeprefix("turnlog.")
    for info in pkgutil.walk_packages(turnlog.__path__, "turnlog.")
    if info.name.removeprefix("turnlog.").startswith("_")
)
ADAPTER_MODULES = sorted(
    info.name for info in pkgutil.walk_packages(turnlog.adapters.__path__, "turnlog.adapters.")
)


def public_names(module: ModuleType) -> set[str]:
    """Classes and functions bound in ``module`` under a name without a leading underscore."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
    }


def defined_here(module: ModuleType) -> set[str]:
    """Public classes and functions defined in ``module`` itself (not imported)."""
    return {
        name
        for name in public_names(module)
        if getattr(vars(module)[name], "__module__", None) == module.__name__
    }


def public_home() -> dict[str, str]:
    """Every public name outside the top level -> the public submodule that exports it."""
    home: dict[str, str] = {}
    for name in REEXPORTING_MODULES:
        module = importlib.import_module(f"turnlog.{name}")
        for exported in module.__all__:
            if exported not in turnlog.__all__:
                assert exported not in home, f"{exported} is exported by two submodules"
                home[exported] = f"turnlog.{name}"
    return home


def test_top_level_is_the_main_path() -> None:
    assert turnlog.__all__ == TOP_LEVEL


@pytest.mark.parametrize(
    "name", ["turnlog", *(f"turnlog.{m}" for m in sorted(PUBLIC_KERNEL_MODULES))]
)
def test_all_is_sorted_without_duplicates_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    declared = module.__all__
    assert declared == sorted(declared)
    assert len(declared) == len(set(declared))
    assert [n for n in declared if n not in vars(module)] == []


def test_every_public_class_and_function_of_the_package_is_in_all() -> None:
    assert public_names(turnlog) - set(turnlog.__all__) == set()


@pytest.mark.parametrize("name", REEXPORTING_MODULES)
def test_every_public_class_and_function_of_a_submodule_is_in_its_all(name: str) -> None:
    module = importlib.import_module(f"turnlog.{name}")
    assert public_names(module) - set(module.__all__) == set()


def test_each_public_name_has_one_home_besides_the_base_error() -> None:
    home = public_home()
    assert set(home).isdisjoint(turnlog.__all__)
    errors = importlib.import_module("turnlog.errors")
    assert errors.KernelError is turnlog.KernelError


def test_the_package_and_its_submodules_export_what_a_user_needs() -> None:
    needed = {
        "open",
        "Log",
        "Draft",
        "KernelError",
        "Policy",
        "Packer",
        "Replayer",
        "pack",
        "Compactor",
    }
    assert needed <= set(turnlog.__all__)
    home = public_home()
    assert {
        name: home[name]
        for name in (
            "Appended",
            "Store",
            "Packed",
            "Stage",
            "PackState",
            "StageReport",
            "Summarizer",
            "Projection",
            "Prompt",
            "MemoryStore",
            "LMDBStore",
            "UserMessageAdded",
            "AppendConflictError",
        )
    } == {
        "Appended": "turnlog.log",
        "Store": "turnlog.stores",
        "Packed": "turnlog.packing",
        "Stage": "turnlog.packing",
        "PackState": "turnlog.packing",
        "StageReport": "turnlog.packing",
        "Summarizer": "turnlog.compaction",
        "Projection": "turnlog.packing",
        "Prompt": "turnlog.packing",
        "MemoryStore": "turnlog.stores",
        "LMDBStore": "turnlog.stores",
        "UserMessageAdded": "turnlog.events",
        "AppendConflictError": "turnlog.errors",
    }


def test_engine_parts_are_not_public() -> None:
    home = public_home()
    for name in ("PackIndex", "Item", "Unit", "Ledger", "Engine"):
        assert name not in home and name not in turnlog.__all__


def test_implementation_modules_are_private() -> None:
    public = {name for name in KERNEL_MODULES if not name.startswith("_")}
    assert public == PUBLIC_KERNEL_MODULES


def test_every_released_name_is_still_reachable() -> None:
    home = public_home()
    lost = sorted(RELEASED_0_2_0 - set(turnlog.__all__) - set(home) - set(INTERNAL))
    assert lost == []


#: Every name with a deprecated top-level path: the 0.2.0 names that moved, and the
#: names added at the top level after 0.2.0 before they got their submodule.
MOVED = sorted(set(vars(turnlog)["_MOVED"]) | set(INTERNAL))


def test_every_released_name_that_moved_has_a_deprecated_path() -> None:
    assert RELEASED_0_2_0 - set(TOP_LEVEL) <= set(MOVED)


@pytest.mark.parametrize("name", MOVED)
def test_a_moved_name_warns_naming_its_new_path_and_resolves(name: str) -> None:
    where = public_home().get(name) or INTERNAL[name]
    with pytest.warns(DeprecationWarning, match=rf"turnlog\.{name}\b") as caught:
        found = getattr(turnlog, name)
    assert found is getattr(importlib.import_module(where), name)
    message = str(caught[0].message)
    if name in INTERNAL:
        assert "leaves the public API" in message
    else:
        assert f"from {where} import {name}" in message
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_a_moved_name_warns_through_from_import() -> None:
    with pytest.warns(DeprecationWarning, match=r"from turnlog\.events import TextPart"):
        from turnlog import TextPart  # type: ignore[attr-defined]
    assert TextPart is importlib.import_module("turnlog.events").TextPart


def test_an_unknown_name_is_an_attribute_error_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'Nonesuch'"):
            getattr(turnlog, "Nonesuch")  # noqa: B009
        assert not hasattr(turnlog, "Nonesuch")


@pytest.mark.parametrize("name", PRIVATE_MODULES)
def test_private_module_all_lists_what_the_public_modules_reexport(name: str) -> None:
    module = importlib.import_module(f"turnlog.{name}")
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"turnlog.{name} declares no __all__ list"
    assert declared == sorted(declared)
    home = public_home()
    for exported in declared:  # the public name is this module's object
        if exported in INTERNAL:
            continue
        where = "turnlog" if exported in turnlog.__all__ else home.get(exported)
        assert where is not None, f"turnlog.{name}.{exported} is in __all__ but not public"
        assert getattr(importlib.import_module(where), exported) is getattr(module, exported)


@pytest.mark.parametrize("name", PRIVATE_MODULES)
def test_every_public_name_defined_in_a_private_module_is_exported_or_internal(name: str) -> None:
    # A public-looking class or function defined in a private module is either exported
    # or used only inside the kernel; one that is exported is in its module's __all__.
    module = importlib.import_module(f"turnlog.{name}")
    exported = set(turnlog.__all__) | set(public_home())
    for defined in defined_here(module) & exported:
        assert defined in module.__all__, (
            f"turnlog.{name}.{defined} is exported by the "
            "package but missing from the module's __all__"
        )


@pytest.mark.parametrize("name", ADAPTER_MODULES)
def test_public_module_declares_all(name: str) -> None:
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"{name} declares no __all__ list"
    assert [n for n in declared if not hasattr(module, n)] == []
    assert declared == sorted(declared)
    assert len(declared) == len(set(declared))


#: The `Packer` methods of 0.2.0 that are the `Replayer`'s now.
PACKER_0_2_0 = ("check", "diff", "explain", "record", "repack", "replay", "replay_all", "requests")


@pytest.mark.parametrize("name", PACKER_0_2_0)
def test_a_packer_method_of_0_2_0_warns_naming_the_replayer_and_forwards(name: str) -> None:
    log = turnlog.open(":memory:")
    log.append("s", turnlog.events.UserMessageAdded(text="hi"))
    packer = turnlog.Packer(log)
    seq = turnlog.Replayer(packer).record("s").request_seq
    args: dict[str, tuple[object, ...]] = {
        "check": ("s", seq),
        "diff": ("s", seq, seq),
        "explain": ("s", seq),
        "record": ("s",),
        "repack": ("s", seq),
        "replay": ("s", seq),
        "replay_all": ("s",),
        "requests": ("s",),
    }
    with pytest.warns(
        DeprecationWarning,
        match=rf"Packer\.{name} has moved: use "
        rf"turnlog\.Replayer\(packer\)\.{name}",
    ) as caught:
        found = getattr(packer, name)(*args[name])
    assert caught[0].filename == __file__  # the warning points at the caller's line
    expected = getattr(turnlog.Replayer(packer), name)(*args[name])
    if name == "record":
        assert found.packed.prompt.hash == expected.packed.prompt.hash
    elif name == "replay_all":
        assert list(found) == list(expected)
    elif name in ("check", "explain", "repack"):
        assert found.prompt.hash == expected.prompt.hash
    else:
        assert found == expected
