"""The edges of turnlog: everything that knows a world outside the kernel.

Five jobs, one subpackage (or module) each; all depend on ``turnlog`` only:

* ``turnlog.adapters.providers``: provider wire formats, one `Provider` record
  per API (render a packed prompt, parse replies, base URL, headers, quirks),
  the HTTP client, the model summarizers, and a local fake server.
* ``turnlog.adapters.importers``: transcript importers and exporters (Claude
  Code, Codex, OpenAI, mini-swe-agent, SWE-agent, OpenHands, Aider), with
  format detection.
* ``turnlog.adapters.integrations``: orchestrator integrations (LangChain, the
  OpenAI Agents SDK), each imported on its own.
* ``turnlog.adapters.redaction``: the `Redactor` that replaces secrets by
  placeholders before they are appended (detect-secrets' plugins, the
  ``turnlog[redact]`` extra), used by the sessions, the importers and ``turnlog import``.
* ``turnlog.adapters.session``: the `Session` facade an orchestrator drives,
  and its asyncio twin `AsyncSession`, re-exported here:
  ``from turnlog.adapters import Session``.
"""

from .session import Answer, AsyncSession, ContextToolResult, Request, Session

__all__ = ["Answer", "AsyncSession", "ContextToolResult", "Request", "Session"]
