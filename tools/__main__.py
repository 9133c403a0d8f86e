"""``python -m turnlog.tools``: the ``turnlog`` command."""

from turnlog.tools.cli import main

raise SystemExit(main())
