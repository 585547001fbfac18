"""The environment every process zwarm starts gets (a supervisor, an agent, a hook, a job).

Owns ``for_children`` and the names of the variables no child ever gets: the built-in
orchestrator's own key (``ORCH_KEY_VAR``) and the caller name of a ``zwarm mcp``
(``SOURCE_VAR``). Must stay true: every process zwarm starts gets its environment through
``for_children``, so never that key, wherever zwarm found it (a user who exported it in their
shell runs ``zwarm spawn``, ``serve`` or ``mcp`` with it; only ``zwarm orchestrate`` reads it,
``orchestrator.guard``), and never the caller name (an agent's own MCP server is a caller of
its own, never its orchestrator's). Imports only the standard library.
"""

from collections.abc import Mapping

ORCH_KEY_VAR = "ZWARM_ORCH_API_KEY"  # the orchestrator's alone: no process zwarm starts gets it
SOURCE_VAR = "ZWARM_SOURCE"  # names the caller of one ``zwarm mcp``: never its agents' servers


def for_children(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as a process zwarm starts (a supervisor, an agent, a hook) gets it: without
    the orchestrator-only key (``ORCH_KEY_VAR``), which only ``zwarm orchestrate`` reads, nor
    the caller name of a ``zwarm mcp`` (``SOURCE_VAR``)."""
    return {k: v for k, v in environ.items() if k not in (ORCH_KEY_VAR, SOURCE_VAR)}
