"""The store suite turnlog ships (`turnlog.testing.StoreConformance` and
`agreement_machine`), run on the built-in backends exactly as a backend written
elsewhere runs it: one factory each.

The full conformance suite of this repository (test_log_conformance.py) and the
model machines (test_log_stateful.py) check more through `turnlog.open`; this
module proves the shipped cases hold for every built-in store, so a new backend
that passes them keeps the same contract.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pgserver
import pytest
from hypothesis import settings
from turnlog.stores import LMDBStore, MemoryStore, PostgresStore, Store
from turnlog.testing import StoreConformance, agreement_machine

STEPS = settings(stateful_step_count=30)

_ROOT = Path(tempfile.mkdtemp(prefix="turnlog-store-suite-"))
atexit.register(shutil.rmtree, _ROOT, True)
_NAMES = itertools.count()


def lmdb_store() -> Store:
    """A new LMDB store in its own directory (removed when the test run ends)."""
    return LMDBStore(_ROOT / f"lmdb{next(_NAMES)}", sync=False)


def lmdb_reopen(store: Store) -> Store:
    assert isinstance(store, LMDBStore)
    store.close()
    return LMDBStore(store.location, sync=False)


def postgres_store() -> Store:
    """A new PostgreSQL store: its own schema on the test server."""
    return PostgresStore(pgserver.shared().url(), schema=f"suite{os.getpid()}_{next(_NAMES)}")


def postgres_reopen(store: Store) -> Store:
    assert isinstance(store, PostgresStore)
    store.close()
    return PostgresStore(pgserver.shared().url(), schema=store.schema)


class TestMemoryStoreConforms(StoreConformance):
    def make_store(self) -> Store:
        return MemoryStore()


class TestLMDBStoreConforms(StoreConformance):
    def make_store(self) -> Store:
        return lmdb_store()

    def reopen_store(self, store: Store) -> Store:
        return lmdb_reopen(store)


@pytest.mark.skipif(not pgserver.available(), reason=pgserver.SKIP_REASON)
class TestPostgresStoreConforms(StoreConformance):
    def make_store(self) -> Store:
        return postgres_store()

    def reopen_store(self, store: Store) -> Store:
        return postgres_reopen(store)


TestMemoryAndLMDBAgree = agreement_machine(
    {"memory": MemoryStore, "lmdb": lmdb_store}, reopen={"lmdb": lmdb_reopen}
).TestCase
TestMemoryAndLMDBAgree.settings = STEPS

TestMemoryLMDBAndPostgresAgree = pytest.mark.skipif(
    not pgserver.available(), reason=pgserver.SKIP_REASON
)(
    agreement_machine(
        {"memory": MemoryStore, "lmdb": lmdb_store, "postgres": postgres_store},
        reopen={"lmdb": lmdb_reopen, "postgres": postgres_reopen},
    ).TestCase
)
TestMemoryLMDBAndPostgresAgree.settings = STEPS


def test_agreement_needs_two_stores() -> None:
    with pytest.raises(ValueError, match="at least two"):
        agreement_machine({"memory": MemoryStore})
