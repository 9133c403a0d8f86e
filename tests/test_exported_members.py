"""The public surface: ``import turnlog`` gives everything, implementation modules are
private, and every module's ``__all__`` lists exactly what it means to export."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest
import turnlog
import turnlog.adapters

#: The kernel's public modules besides the package itself.
PUBLIC_KERNEL_MODULES = {"testing"}

KERNEL_MODULES = sorted(info.name for info in pkgutil.iter_modules(turnlog.__path__)
                        if info.name not in ("adapters", "tools"))
PRIVATE_MODULES = sorted(
    info.name.removeprefix("turnlog.")
    for info in pkgutil.walk_packages(turnlog.__path__, "turnlog.")
    if info.name.removeprefix("turnlog.").startswith("_"))
ADAPTER_MODULES = sorted(
    info.name for info in pkgutil.walk_packages(turnlog.adapters.__path__, "turnlog.adapters."))


def public_names(module: ModuleType) -> set[str]:
    """Classes and functions bound in ``module`` under a name without a leading underscore."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))}


def defined_here(module: ModuleType) -> set[str]:
    """Public classes and functions defined in ``module`` itself (not imported)."""
    return {name for name in public_names(module)
            if getattr(vars(module)[name], "__module__", None) == module.__name__}


def test_all_is_sorted() -> None:
    assert turnlog.__all__ == sorted(turnlog.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(turnlog.__all__) == len(set(turnlog.__all__))


def test_every_name_in_all_exists() -> None:
    missing = [name for name in turnlog.__all__ if not hasattr(turnlog, name)]
    assert missing == []


def test_every_public_class_and_function_of_the_package_is_in_all() -> None:
    assert public_names(turnlog) - set(turnlog.__all__) == set()


def test_the_package_exports_what_a_user_needs() -> None:
    needed = {"open", "Log", "Draft", "Appended", "KernelError", "Store", "Policy", "Packer",
              "pack", "Packed", "Stage", "PackState", "StageReport", "Compactor", "Summarizer",
              "Projection", "Prompt", "MemoryStore", "LMDBStore"}
    assert needed <= set(turnlog.__all__)


def test_implementation_modules_are_private() -> None:
    public = {name for name in KERNEL_MODULES if not name.startswith("_")}
    assert public == PUBLIC_KERNEL_MODULES


@pytest.mark.parametrize("name", PRIVATE_MODULES)
def test_private_module_all_lists_what_the_package_reexports(name: str) -> None:
    module = importlib.import_module(f"turnlog.{name}")
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"turnlog.{name} declares no __all__ list"
    assert declared == sorted(declared)
    assert [n for n in declared if n not in turnlog.__all__] == []
    for exported in declared:  # the package's name is this module's object
        assert getattr(turnlog, exported) is getattr(module, exported), exported


@pytest.mark.parametrize("name", PRIVATE_MODULES)
def test_every_public_name_defined_in_a_private_module_is_exported_or_internal(
        name: str) -> None:
    # A public-looking class or function defined in a private module is either exported
    # by the package or used only inside the kernel; it must never be reached by users
    # through the private module, so the package exports every one that is documented.
    module = importlib.import_module(f"turnlog.{name}")
    for exported in defined_here(module) & set(turnlog.__all__):
        assert exported in module.__all__, f"turnlog.{name}.{exported} is exported by the " \
            "package but missing from the module's __all__"


@pytest.mark.parametrize("name", ["turnlog.testing", *ADAPTER_MODULES])
def test_public_module_declares_all(name: str) -> None:
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"{name} declares no __all__ list"
    assert [n for n in declared if not hasattr(module, n)] == []
    assert len(declared) == len(set(declared))
