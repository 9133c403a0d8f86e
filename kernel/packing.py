"""Building prompts: the stages `turnlog.pack` runs, the state they act on, what a
pack returns, the prompt's shape, token counting and rendering, and the table of
known models (context window, output limit, tokenizer by model name), and the
context tools' specs (``CONTEXT_TOOLS``; ``turnlog.adapters.Session`` runs them).

A custom stage is a `Stage` (a name and a function of a `PackState`) placed in
a list with ``DEFAULT_STAGES`` and passed to ``turnlog.pack`` or
``turnlog.Packer``; it reports what it did as a `StageReport`.
"""

from __future__ import annotations

from ._context import CONTEXT_TOOLS, READ_OUTPUT
from ._models import ModelInfo, ModelTable
from ._pack import (
    DECISIONS,
    DEFAULT_STAGES,
    SUMMARY_SECTION,
    Budget,
    Decision,
    Packed,
    PackState,
    Stage,
    StageReport,
)
from ._policy import POLICY_PARTS
from ._projection import Projection, notification_text, recall_text
from ._prompt import Breakpoint, Message, Prompt, Section
from ._replay import Renderer
from ._tokens import TokenCounter, get_counter

__all__ = [
    "Breakpoint",
    "Budget",
    "CONTEXT_TOOLS",
    "DECISIONS",
    "DEFAULT_STAGES",
    "Decision",
    "Message",
    "ModelInfo",
    "ModelTable",
    "POLICY_PARTS",
    "PackState",
    "Packed",
    "Projection",
    "Prompt",
    "READ_OUTPUT",
    "Renderer",
    "SUMMARY_SECTION",
    "Section",
    "Stage",
    "StageReport",
    "TokenCounter",
    "get_counter",
    "notification_text",
    "recall_text",
]
