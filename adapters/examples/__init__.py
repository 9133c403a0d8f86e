"""Runnable examples of turnlog in an orchestrator's request path, each against the local
fake model server (nothing leaves the machine) and writing to the store it is given:

* ``python -m turnlog.adapters.examples.langgraph STORE``: a LangGraph prebuilt agent
  with `TurnlogSaver` and the turnlog model hooks (``pip install 'turnlog[langgraph]'``).
"""

__all__: list[str] = []
