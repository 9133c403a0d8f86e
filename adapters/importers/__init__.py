"""Transcript importers and exporters: agent transcripts in, turnlog sessions out and back.

One module per transcript format, each a pure parser from bytes to an import
plan and an exporter back, declared by one `Format` record (as each provider
declares a ``Provider``); the registry (`FORMATS`), format detection and
the import runs (parse, validate, append idempotently) are in one place.
docs/importers.md has each format's mapping.
"""

from ._openai_responses import ItemMapper
from ._plan import Format
from ._transcripts import (
    ALIASES,
    FORMATS,
    ImportSummary,
    Progress,
    SkippedRecord,
    detect,
    export_session,
    format_name,
    import_file,
    import_path,
)

__all__ = [
    "ALIASES",
    "FORMATS",
    "Format",
    "ImportSummary",
    "ItemMapper",
    "Progress",
    "SkippedRecord",
    "detect",
    "export_session",
    "format_name",
    "import_file",
    "import_path",
]
