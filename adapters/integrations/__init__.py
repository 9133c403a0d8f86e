"""Orchestrator integrations: a turnlog session behind another framework's history API.

* ``turnlog.adapters.integrations.langchain``: LangChain's ``BaseChatMessageHistory``
  (``pip install 'turnlog[langchain]'``).
* ``turnlog.adapters.integrations.openai_agents``: the OpenAI Agents SDK ``Session``
  protocol (``pip install 'turnlog[openai-agents]'``).
* ``turnlog.adapters.integrations.langgraph``: LangGraph's ``BaseCheckpointSaver``
  (`TurnlogSaver`) and model hooks for its prebuilt agent (``TurnlogModelHooks``)
  (``pip install 'turnlog[langgraph]'``).

Each is imported on its own, so its framework is needed only when it is used.
"""

__all__: list[str] = []
