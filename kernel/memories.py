"""Memories and recall: facts a session keeps in a system section of its own,
and passages recalled from other text into the session as events.
"""

from __future__ import annotations

from ._memories import MEMORY_SECTION, Memory, MemoryBook, MemoryManager
from ._recall import Embedder, Recaller

__all__ = [
    "Embedder",
    "MEMORY_SECTION",
    "Memory",
    "MemoryBook",
    "MemoryManager",
    "Recaller",
]
