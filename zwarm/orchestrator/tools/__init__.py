"""The orchestrator tool layer: every tool zwarm offers an LLM, defined once.

zwarm runs coding agents (Codex, Claude Code, Gemini CLI) in the background; these tools are
how an LLM drives it. Every surface (``zwarm tools``, ``zwarm mcp``, ``zwarm orchestrate``,
``dispatch`` here) is generated from ``TOOLS``; nothing about a tool is written twice. The
layer, one job per module:

- ``base``: the ``Tool`` record, ``ToolError``, ``object_schema``, ``to_json``;
- ``catalog``: ``TOOLS``, each tool's name, description, JSON Schema and handler;
- ``toolbox``: ``Toolbox.dispatch`` and ``schemas`` (the tools for OpenAI, Anthropic, MCP);
- ``args``: arguments checked against a tool's schema; ``confine``: ``cwd`` confinement;
- ``looked``: what each caller has been told (the per-caller "last looked" state);
- ``views``: the bounded views of sessions; the handlers: ``sessions``, ``waiting``,
  ``trajectory``, ``review``.

Must stay true (for the whole layer):
- ``Toolbox.dispatch`` never raises: unknown tools, bad arguments, unknown or ambiguous ids,
  finished sessions, even bugs come back as ``{"ok": false, "error": "<one clear line>"}``;
  every success is ``{"ok": true, ...}``; results are compact, JSON-ready and bounded in size;
- arguments are checked against the tool's own schema before its handler runs;
- a ``cwd`` resolves (symlinks followed) to a directory inside an allowed root, or is refused;
- reading a trajectory streams its steps (a huge log is never held in memory);
- ``wait`` blocks at most ``[tools] max_wait_s`` per call, and never returns at once for a
  session the caller was already told had finished (so an LLM cannot busy-poll);
- the layer imports only the standard library and zwarm's core (never mcp, openai or rich);
  it uses ``Zwarm``'s public methods only (never its ``store`` or ``config``), and the API
  never imports this layer (``tests/project/test_layering.py`` checks both).

This package's own names are the ones other code imports (``from zwarm.orchestrator.tools
import Toolbox``); its modules import each other directly, never through this package.
"""

from zwarm.orchestrator.tools.args import parse_arguments, validate_args
from zwarm.orchestrator.tools.base import Handler, Result, Tool, ToolError, object_schema, to_json
from zwarm.orchestrator.tools.catalog import MAX_WAIT_S, TOOL_NAMES, TOOLS
from zwarm.orchestrator.tools.confine import allowed_roots, confine_cwd
from zwarm.orchestrator.tools.looked import Looked
from zwarm.orchestrator.tools.toolbox import FORMATS, Toolbox, dispatch, schemas
from zwarm.orchestrator.tools.trajectory import compact_step
from zwarm.orchestrator.tools.views import fleet_view, session_view, short

__all__ = [
    "FORMATS",
    "MAX_WAIT_S",
    "TOOLS",
    "TOOL_NAMES",
    "Handler",
    "Looked",
    "Result",
    "Tool",
    "ToolError",
    "Toolbox",
    "allowed_roots",
    "compact_step",
    "confine_cwd",
    "dispatch",
    "fleet_view",
    "object_schema",
    "parse_arguments",
    "schemas",
    "session_view",
    "short",
    "to_json",
    "validate_args",
]
