"""``turnlog.__all__`` is sorted and complete, and every kernel module declares ``__all__``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest
import turnlog

KERNEL_MODULES = sorted(
    info.name for info in pkgutil.iter_modules(turnlog.__path__) if not info.ispkg)


def public_names(module: ModuleType) -> set[str]:
    """Classes and functions bound in ``module`` under a name without a leading underscore."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))}


def test_all_is_sorted() -> None:
    assert turnlog.__all__ == sorted(turnlog.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(turnlog.__all__) == len(set(turnlog.__all__))


def test_every_name_in_all_exists() -> None:
    missing = [name for name in turnlog.__all__ if not hasattr(turnlog, name)]
    assert missing == []


def test_every_public_class_and_function_of_the_package_is_in_all() -> None:
    assert public_names(turnlog) - set(turnlog.__all__) == set()


def test_open_and_the_log_types_are_exported() -> None:
    assert {"open", "Log", "Draft", "Appended", "KernelError", "Store"} <= set(turnlog.__all__)


def test_kernel_modules_are_found() -> None:
    assert {"errors", "events", "codec", "chain", "store", "memory", "lmdb", "log"} <= set(
        KERNEL_MODULES)


@pytest.mark.parametrize("name", KERNEL_MODULES)
def test_kernel_module_declares_all(name: str) -> None:
    module = importlib.import_module(f"turnlog.{name}")
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list), f"turnlog.{name} declares no __all__ list"
    assert [n for n in declared if not hasattr(module, n)] == []
    assert len(declared) == len(set(declared))


@pytest.mark.parametrize("name", KERNEL_MODULES)
def test_package_reexports_refer_to_the_defining_module(name: str) -> None:
    # A name exported by the package and by a module must be the same object.
    module = importlib.import_module(f"turnlog.{name}")
    for exported in set(module.__all__) & set(turnlog.__all__):
        assert getattr(turnlog, exported) is getattr(module, exported), exported
