"""Real-agent conformance suite: the pinned codex and claude CLIs driven through zwarm."""
