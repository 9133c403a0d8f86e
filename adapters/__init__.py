"""Provider wire formats, transcript importers and orchestrator integrations.

The orchestrator facade is re-exported here: ``from turnlog.adapters import Session``.
"""

from .session import Answer, Request, Session

__all__ = ["Answer", "Request", "Session"]
