"""The import graph points one way: tools -> adapters -> kernel, and the kernel stays offline.

Rules (checked on the source with `ast`, so an import inside a function or an
``if TYPE_CHECKING`` block counts too):

* ``kernel/`` (``turnlog``) never imports ``turnlog.adapters`` or ``turnlog.tools``;
* ``adapters/`` never imports ``turnlog.tools``;
* ``adapters/`` and ``tools/`` use the kernel through its public API only: never a
  private module (``turnlog._log``...);
* only ``kernel/_lmdb.py`` imports the ``lmdb`` package;
* only ``kernel/_postgres.py`` imports ``psycopg`` and ``psycopg_pool`` (the server
  backend's connections are the kernel's only sockets, and only through them);
* no module of ``kernel/_pack/`` (the pure packing core) imports the log or a store
  (``turnlog._log``, ``turnlog._store`` and the backends): the I/O shell around it,
  `Packer`, lives in ``kernel/_packer.py``;
* the kernel's import graph has no cycle, type-only imports included;
* ``kernel/`` never imports networking: ``http``, ``socket``, ``urllib``, ``requests``
  (nor ``httpx``, ``aiohttp``, ``urllib3``, ``ssl``, ``websockets``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"kernel": "turnlog", "adapters": "turnlog.adapters", "tools": "turnlog.tools"}
#: What the pure packing core must not import: the log and every store.
IO_MODULES = (
    "turnlog._log",
    "turnlog._store",
    "turnlog._memstore",
    "turnlog._lmdb",
    "turnlog._postgres",
    "turnlog._copy",
    "turnlog._verify",
    "turnlog._packer",
    "turnlog._replay",
)
NETWORK = (
    "http",
    "socket",
    "urllib",
    "requests",
    "httpx",
    "aiohttp",
    "urllib3",
    "ssl",
    "websockets",
)


def imported_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` for every import in ``source``.

    ``package`` is the package the module lives in, used to resolve relative
    imports. ``from a import b`` yields both ``a`` and ``a.b`` (``b`` may be a
    submodule). ``__import__("x")`` and ``importlib.import_module("x")`` with a
    literal name count as imports of ``x``.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else (func.attr if isinstance(func, ast.Attribute) else "")
            )
            first = node.args[0]
            if (
                name in ("__import__", "import_module")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield node.lineno, first.value


def within(module: str, prefix: str) -> bool:
    """True when ``module`` is ``prefix`` or inside it."""
    return module == prefix or module.startswith(prefix + ".")


def violations(source: str, folder: str, filename: str) -> list[str]:
    """Every broken rule in one module of ``folder`` (kernel, adapters, tools)."""
    found: list[str] = []
    # the package a module sits in: its folder's package plus any subfolders
    package = ".".join([PACKAGES[folder], *Path(filename).parent.parts])
    for line, module in imported_modules(source, package):
        where = f"{folder}/{filename}:{line} imports {module}"
        if folder == "kernel" and (
            within(module, "turnlog.adapters") or within(module, "turnlog.tools")
        ):
            found.append(f"{where}: the kernel must not depend on adapters or tools")
        if folder == "adapters" and within(module, "turnlog.tools"):
            found.append(f"{where}: adapters must not depend on tools")
        if folder != "kernel" and module.startswith("turnlog._"):
            found.append(f"{where}: outside the kernel, use the public API (import turnlog)")
        if within(module, "lmdb") and (folder, filename) != ("kernel", "_lmdb.py"):
            found.append(f"{where}: only kernel/_lmdb.py may import lmdb")
        if (within(module, "psycopg") or within(module, "psycopg_pool")) and (folder, filename) != (
            "kernel",
            "_postgres.py",
        ):
            found.append(f"{where}: only kernel/_postgres.py may import psycopg")
        if (
            folder == "kernel"
            and filename.startswith("_pack/")
            and any(within(module, io) for io in IO_MODULES)
        ):
            found.append(
                f"{where}: the packing core does no I/O (the Packer shell is kernel/_packer.py)"
            )
        if folder == "kernel" and any(within(module, net) for net in NETWORK):
            found.append(f"{where}: the kernel does no network I/O")
    return found


def project_modules() -> Iterator[tuple[str, str, str]]:
    """``(folder, path relative to the folder, source)`` for every project module."""
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield folder, path.relative_to(ROOT / folder).as_posix(), path.read_text("utf-8")


MODULES = list(project_modules())


@pytest.mark.parametrize(
    ("folder", "filename", "source"), MODULES, ids=[f"{f}/{n}" for f, n, _ in MODULES]
)
def test_module_respects_the_layering(folder: str, filename: str, source: str) -> None:
    assert violations(source, folder, filename) == []


def test_every_layer_has_modules_to_check() -> None:
    folders = {folder for folder, _, _ in MODULES}
    assert folders == set(PACKAGES)
    assert ("kernel", "_lmdb.py") in {(f, n) for f, n, _ in MODULES}


def test_lmdb_backend_is_found_importing_lmdb() -> None:
    source = (ROOT / "kernel" / "_lmdb.py").read_text("utf-8")
    assert any(module == "lmdb" for _, module in imported_modules(source, "turnlog"))


@pytest.mark.parametrize(
    ("folder", "filename", "source"),
    [
        ("kernel", "pack.py", "from turnlog.adapters import openai"),
        ("kernel", "pack.py", "import turnlog.tools.cli"),
        ("kernel", "pack.py", "from .adapters import anthropic"),
        ("kernel", "pack.py", "from . import tools"),
        ("kernel", "pack.py", "def f():\n    from .tools.cli import main\n"),
        ("kernel", "store.py", "import lmdb"),
        ("kernel", "log.py", "from lmdb import Environment"),
        ("kernel", "view.py", "import socket"),
        ("kernel", "view.py", "from http.client import HTTPConnection"),
        ("kernel", "view.py", "import urllib.request"),
        ("kernel", "view.py", "import requests"),
        ("kernel", "view.py", "importlib.import_module('httpx')"),
        ("kernel", "view.py", "__import__('socket')"),
        ("adapters", "openai.py", "from turnlog.tools import cli"),
        ("adapters", "openai.py", "from ..tools import cli"),
        ("adapters", "openai.py", "from .. import tools"),
        ("adapters", "openai.py", "import lmdb"),
        ("tools", "cli.py", "import lmdb"),
        ("adapters", "session.py", "from turnlog._log import backoff"),
        ("tools", "cli.py", "import turnlog._packer"),
        ("kernel", "_pack/_engine.py", "from .._log import Log"),
        ("kernel", "_pack/_stage.py", "from turnlog._store import ReadTxn"),
        ("kernel", "_pack/_engine.py", "from .. import _lmdb"),
        ("kernel", "_pack/_engine.py", "if TYPE_CHECKING:\n    from .._packer import Packer\n"),
    ],
    ids=lambda value: value if isinstance(value, str) and "\n" not in value else None,
)
def test_checker_catches_a_forbidden_import(folder: str, filename: str, source: str) -> None:
    assert violations(source, folder, filename)


@pytest.mark.parametrize(
    ("folder", "filename", "source"),
    [
        ("kernel", "_lmdb.py", "import lmdb"),
        ("kernel", "log.py", "from .store import Store"),
        ("kernel", "log.py", "from . import events"),
        ("adapters", "openai.py", "from .. import Log"),
        ("adapters", "openai.py", "import turnlog"),
        ("tools", "cli.py", "from turnlog.adapters import openai"),
        ("tools", "cli.py", "import socket"),
        ("kernel", "view.py", "import httpcore_like_name_but_not_http"),
        ("kernel", "_pack/_engine.py", "from .._projection import Projection"),
        ("kernel", "_packer.py", "from ._log import Log"),
    ],
)
def test_checker_allows_a_permitted_import(folder: str, filename: str, source: str) -> None:
    assert violations(source, folder, filename) == []


def kernel_graph(modules: list[tuple[str, str, str]]) -> dict[str, set[str]]:
    """Which kernel module imports which, by file (``_pack/_engine.py``...).

    Every import counts, type-only ones and those inside functions too. A name such
    as ``turnlog._pack.Packed`` is the module its longest prefix names; importing a
    submodule runs its package's ``__init__`` as well, but that is not counted (every
    module would then import the top-level ``turnlog`` and all would be one cycle).
    """
    files = {filename for folder, filename, _ in modules if folder == "kernel"}

    def module_file(module: str) -> str | None:
        parts = module.split(".")
        if parts[0] != "turnlog":
            return None
        for end in range(len(parts), 0, -1):
            path = "/".join(parts[1:end])
            for name in (f"{path}.py", f"{path}/__init__.py" if path else "__init__.py"):
                if name in files:
                    return name
        return None

    graph: dict[str, set[str]] = {name: set() for name in files}
    for folder, filename, source in modules:
        if folder != "kernel":
            continue
        package = ".".join(["turnlog", *Path(filename).parent.parts])
        for _, module in imported_modules(source, package):
            target = module_file(module)
            if target is not None and target != filename:
                graph[filename].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_kernel_has_no_import_cycle() -> None:
    assert cycles(kernel_graph(MODULES)) == []


def test_cycle_finder_sees_a_type_only_import_cycle() -> None:
    modules = [
        ("kernel", "_pack/_ledger.py", "if TYPE_CHECKING:\n    from ._trim import Marker\n"),
        ("kernel", "_pack/_trim.py", "from ._ledger import Ledger\n"),
        ("kernel", "_pack/__init__.py", "from ._trim import Trim\n"),
        ("kernel", "_pack/_model.py", "from .._prompt import Prompt\n"),
        ("kernel", "_prompt.py", ""),
    ]
    assert cycles(kernel_graph(modules)) == [["_pack/_ledger.py", "_pack/_trim.py"]]
    modules[0] = ("kernel", "_pack/_ledger.py", "from .._prompt import Prompt\n")
    assert cycles(kernel_graph(modules)) == []
