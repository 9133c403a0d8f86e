"""Provider wire formats, transcript importers and orchestrator integrations."""
