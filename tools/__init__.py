"""The turnlog command."""
