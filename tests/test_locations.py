"""Locations: `turnlog.open` looks the store up in one table, and ``create=False`` opens
only a store that exists (`StoreNotFoundError` otherwise, with nothing created)."""

from __future__ import annotations

import os
from pathlib import Path

import pgserver
import pytest
import turnlog
from turnlog._locations import SCHEMES, scheme_for
from turnlog.errors import InvalidArgumentError, StoreError, StoreNotFoundError
from turnlog.events import UserMessageAdded
from turnlog.stores import LMDBStore, MemoryStore, PostgresStore


@pytest.mark.parametrize(
    ("location", "backend"),
    [
        (":memory:", "memory"),
        ("postgresql://agent@db.example/turnlog", "postgres"),
        ("postgres://agent@db.example/turnlog", "postgres"),
        ("store", "lmdb"),
        ("./:memory:", "lmdb"),
        ("postgresql", "lmdb"),
        (Path("some/dir"), "lmdb"),
    ],
)
def test_a_location_names_its_backend_through_the_table(location: str | Path, backend: str) -> None:
    scheme, text = scheme_for(location)
    assert scheme.name == backend and text == os.fspath(location)


def test_every_scheme_claims_its_own_example_first() -> None:
    assert [scheme_for(s.example)[0].name for s in SCHEMES] == [s.name for s in SCHEMES]
    assert {s.name for s in SCHEMES} == {MemoryStore.name, LMDBStore.name, PostgresStore.name}


def test_open_refuses_a_location_that_is_not_a_path() -> None:
    with pytest.raises(InvalidArgumentError, match="path must be a str or path-like"):
        turnlog.open(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="create must be a bool"):
        turnlog.open(":memory:", create=1)  # type: ignore[arg-type]


def test_open_without_create_refuses_a_missing_lmdb_store_and_creates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "nothing-here"
    with pytest.raises(StoreNotFoundError, match=r"no turnlog store at .*create=True"):
        turnlog.open(path, create=False)
    assert not path.exists()
    with pytest.raises(StoreNotFoundError, match="opening it for writing"):
        turnlog.open(path, readonly=True)
    assert issubclass(StoreNotFoundError, StoreError)  # callers catching StoreError still do


def test_open_without_create_opens_an_existing_store(tmp_path: Path) -> None:
    with turnlog.open(tmp_path / "s") as log:
        log.append("a", UserMessageAdded(text="hi"))
    with turnlog.open(tmp_path / "s", create=False) as log:
        assert log.head("a") is not None and log.verify().ok


def test_an_in_memory_store_never_exists_before_it_is_opened() -> None:
    with pytest.raises(StoreNotFoundError, match="in-memory"):
        turnlog.open(":memory:", create=False)
    assert turnlog.open(":memory:").sessions() == []


@pytest.mark.skipif(not pgserver.available(), reason=pgserver.SKIP_REASON)
def test_open_without_create_refuses_a_postgres_schema_without_tables() -> None:
    url = pgserver.shared().url(schema=f"missing{os.getpid()}")
    with pytest.raises(StoreNotFoundError, match=r"has no turnlog tables.*create=True"):
        turnlog.open(url, create=False)
    with turnlog.open(url) as log:  # created now
        log.append("a", UserMessageAdded(text="hi"))
    with turnlog.open(url, create=False) as log:
        assert log.head("a") is not None
