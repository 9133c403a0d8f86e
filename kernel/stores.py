"""The storage interface a `turnlog.Log` runs on, and the backends that implement it.

`Store`, `ReadTxn` and `WriteTxn` are the interface (the only classes meant to
be implemented outside turnlog); `LMDBStore` (embedded, on disk), `MemoryStore`
(in process) and `PostgresStore` (a server, ``pip install 'turnlog[postgres]'``)
are the backends ``turnlog.open`` picks by location. ``hide_credentials`` is a
location as it may be printed: without its password.
"""

from __future__ import annotations

from ._lmdb import LMDBStore
from ._memstore import MemoryStore
from ._postgres import PostgresStore
from ._store import ReadTxn, Store, WriteTxn, hide_credentials

__all__ = [
    "LMDBStore",
    "MemoryStore",
    "PostgresStore",
    "ReadTxn",
    "Store",
    "WriteTxn",
    "hide_credentials",
]
