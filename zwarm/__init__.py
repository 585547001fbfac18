"""zwarm: run Codex, Claude Code and Gemini CLI agents as background sessions, every turn on disk.

The Python API lives in ``zwarm.api`` (``Zwarm``); this package root stays import-free so that
every command and every supervisor starts fast.
"""

__version__ = "0.1.0"
