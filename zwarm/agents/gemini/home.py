"""The home of its own each gemini session runs in (``GEMINI_CLI_HOME``), and its settings:
what ``GeminiAgent.launch_env`` does before each turn (``launch_env``).

Gemini reads its settings from ``$GEMINI_CLI_HOME/.gemini/settings.json`` and keeps all its
state there (projects, session records, trusted folders). Headless it needs an auth type in
that file (environment variables alone fail in 0.61.0), and telemetry off: usage statistics go
to Google unless the settings file says no, and no environment variable stops them. It also
applies a *trusted* working folder's ``.gemini/settings.json`` (MCP server commands, hooks,
tool discovery/call commands, policies, sandbox) and ``.env``, which an agent's file edit or
a cloned repository writes: so the working folder is never trusted. gemini's folder-trust
check is off in the settings (headless it would exit 55 on an untrusted folder) and
``GEMINI_CLI_TRUST_WORKSPACE=false`` marks the folder untrusted: gemini 0.61.0 then ignores
its settings, its ``.env`` (``advanced.ignoreLocalEnv`` too), its hooks and policies, MCP
servers and extensions. It also forces ``--approval-mode`` to ``default``: the approval mode
is carried by zwarm's own policy files instead (``GeminiAgent``, ``policies/``).
``prepare`` writes, before every turn, into ``sessions/<id>/gemini-home``: ``settings.json`` =
the user's own settings (if any, and ``user_settings``) + what zwarm needs + ``[gemini]
settings`` overrides + the untrusted-folder pins, and an empty ``trustedFolders.json``. The
same home serves every turn, so ``--resume`` finds the session (it also needs the same
absolute cwd: the pin's).

Must stay true:
- no secret is ever written: credentials reach gemini only through its environment. The auth
  type is chosen from the environment (``GEMINI_API_KEY``/``GOOGLE_API_KEY``: API key;
  ``GOOGLE_GENAI_USE_VERTEXAI=true``: Vertex AI; ``GEMINI_CLI_USE_COMPUTE_ADC=true``) unless
  ``[gemini] auth`` says; Google login (``oauth-personal``) is refused, because gemini would
  cache its tokens in the session home. Values the user's settings hold under secret-looking
  keys (api key, token, secret, password, authorization, credential) are dropped unless they
  are ``$VARIABLE`` references, which gemini expands from the environment;
- usage statistics, telemetry and update checks are off unless ``[gemini] settings`` turns them
  back on explicitly; ``general.maxAttempts`` is ``max_attempts`` when set (> 0);
- the working folder is never trusted, whatever the user's settings, ``[gemini] settings`` or
  environment say: ``security.folderTrust.enabled`` false, ``advanced.ignoreLocalEnv`` true,
  ``GEMINI_CLI_TRUST_WORKSPACE=false`` (``UNTRUSTED``, ``environment``);
- the session marker (``ZWARM_SESSION_ID``) is in ``security.environmentVariableRedaction.
  allowed``, whatever the overrides say: gemini strips every variable not allowed from its
  shell commands' environment under strict sanitization (``GITHUB_SHA`` set, as in GitHub
  Actions), and the marker is how zwarm finds the commands it started in their own sessions;
- nothing written follows a link: a directory of the home that is not a real directory (an
  agent may plant a link) is replaced, files are written with ``O_NOFOLLOW`` (``write_private``);
- a problem setting up the home fails the turn to start with one line (``AgentSetupError``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zwarm.agents.base import AgentSetupError
from zwarm.errors import InvalidInput, StoreError
from zwarm.secret_names import looks_secret
from zwarm.system.procs import MARKER

HOME_DIR = "gemini-home"
# ``[gemini] auth``: "" = from the environment (``auth_type``)
AUTH_TYPES = ("", "gemini-api-key", "vertex-ai", "compute-default-credentials", "external")
# what the engine puts in every agent's environment and its shell commands need: the marker,
# and the parent/state dir by which a `zwarm spawn` from inside becomes a child session, and
# the launcher it runs zwarm with, and the PATH a child's agent is looked up on (named by
# zwarm.engine.tree, above the agents: spelled out here)
KEEP = (MARKER, "ZWARM_PARENT_SESSION", "ZWARM_DIR", "ZWARM", "ZWARM_AGENT_PATH")

MAX_USER_SETTINGS = 1 << 20
_ENV_REF = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
_NEEDS: dict[str, Any] = {
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
# merged last: with folder trust off and GEMINI_CLI_TRUST_WORKSPACE=false the working folder
# is untrusted without the headless exit 55, so gemini ignores its .gemini/settings.json
# (MCP servers, hooks, discovery commands, policies) and .env
UNTRUSTED: dict[str, Any] = {
    "security": {"folderTrust": {"enabled": False}},
    "advanced": {"ignoreLocalEnv": True},
}


class GeminiSetupError(InvalidInput):
    """A gemini session cannot be set up (no credentials, unreadable user settings): why."""


def auth_type(table: Mapping[str, Any], env: Mapping[str, str], user: Mapping[str, Any]) -> str:
    """The auth gemini uses: ``[gemini] auth``, else what the environment holds, else the
    user's own setting; ``GeminiSetupError`` when that is Google login or nothing."""
    configured = str(table.get("auth") or "")
    if configured:
        return configured
    if env.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() == "true":
        return "vertex-ai"
    if env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY"):
        return "gemini-api-key"
    if env.get("GEMINI_CLI_USE_COMPUTE_ADC", "").lower() == "true":
        return "compute-default-credentials"
    selected = _dig(user, "security", "auth", "selectedType")
    if isinstance(selected, str) and selected in AUTH_TYPES[1:]:
        return selected
    hint = "set GEMINI_API_KEY (or GOOGLE_GENAI_USE_VERTEXAI=true with Vertex AI credentials)"
    if selected == "oauth-personal":
        raise GeminiSetupError(
            "gemini sessions cannot use Google login (it would cache tokens in the session's "
            f"home): {hint}, in your environment or [gemini] env"
        )
    raise GeminiSetupError(f"no Gemini credentials for the session: {hint}")


def settings(
    table: Mapping[str, Any], env: Mapping[str, str], user: Mapping[str, Any]
) -> dict[str, Any]:
    """The session's settings.json: the user's, what zwarm needs, then ``[gemini] settings``."""
    needs = json.loads(json.dumps(_NEEDS))
    auth = auth_type(table, env, user)
    needs["security"] = (
        {"auth": {"useExternal": True}}
        if auth == "external"
        else {"auth": {"selectedType": auth, "useExternal": False}}
    )
    attempts = table.get("max_attempts") or 0
    if attempts > 0:
        needs["general"]["maxAttempts"] = attempts
    merged = merge(merge(without_secrets(user), needs), dict(table.get("settings") or {}))
    merged = merge(merged, json.loads(json.dumps(UNTRUSTED)))
    redaction = merged.setdefault("security", {}).setdefault("environmentVariableRedaction", {})
    allowed = redaction.get("allowed")
    allowed = [a for a in allowed if isinstance(a, str)] if isinstance(allowed, list) else []
    redaction["allowed"] = [*allowed, *(k for k in KEEP if k not in allowed)]
    return merged


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` deep-merged onto ``base`` (tables merge, anything else is replaced)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def without_secrets(value: Any, key: str = "") -> Any:
    """``value`` without literal strings under secret-looking keys (``$VAR`` refs kept)."""
    if isinstance(value, Mapping):
        kept = {k: without_secrets(v, k) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not _DROP}
    if isinstance(value, list):
        return [v for v in (without_secrets(v, key) for v in value) if v is not _DROP]
    if isinstance(value, str) and looks_secret(key) and not _ENV_REF.match(value):
        return _DROP
    return value


_DROP = object()


def _dig(d: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)  # type: ignore[assignment]
    return d


# --------------------------------------------------------------------------- the user's settings


def user_settings_path(environ: Mapping[str, str]) -> Path | None:
    """Where the user's gemini keeps its settings (``$GEMINI_CLI_HOME`` or ``~``)."""
    base = environ.get("GEMINI_CLI_HOME") or environ.get("HOME")
    return Path(base) / ".gemini" / "settings.json" if base else None


def read_user_settings(path: Path | None) -> dict[str, Any]:
    """The user's settings (JSON with comments, as gemini allows), ``{}`` if there are none;
    ``GeminiSetupError`` (one line) if they cannot be read."""
    if path is None:
        return {}
    from zwarm.system.files import read_file

    try:
        raw, _ = read_file(path, MAX_USER_SETTINGS, follow=True)  # dotfiles are often links
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise GeminiSetupError(f"cannot read your Gemini settings {path}: {e.strerror}") from None
    try:
        value = json.loads(strip_comments(raw.decode("utf-8")))
    except (ValueError, RecursionError) as e:
        why = str(e).splitlines()[0][:200]
        raise GeminiSetupError(
            f"cannot use your Gemini settings {path}: not valid JSON ({why}); fix it or set "
            "[gemini] user_settings = false"
        ) from None
    if not isinstance(value, dict):
        raise GeminiSetupError(f"cannot use your Gemini settings {path}: not a JSON object")
    return value


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|[^"/]+|/|"', re.S)


def strip_comments(text: str) -> str:
    """JSON with ``//`` and ``/* */`` comments (what gemini reads) as plain JSON."""
    return "".join(" " if t.startswith(("//", "/*")) else t for t in _TOKEN.findall(text))


# --------------------------------------------------------------------------- writing the home


def prepare(home: Path, session_settings: Mapping[str, Any]) -> None:
    """Write the session's home: settings, and no trusted folder (not even ``cwd``)."""
    from zwarm.system.files import write_private

    gemini_dir = home / ".gemini"
    for d in (home, gemini_dir):
        _real_dir(d)
    # default=str: a TOML date in [gemini.settings] becomes its text, never a crash
    text = json.dumps(session_settings, indent=2, ensure_ascii=False, default=str)
    write_private(gemini_dir / "settings.json", text.encode("utf-8"))
    write_private(gemini_dir / "trustedFolders.json", b"{}")  # a stale one trusted cwd


def _real_dir(d: Path) -> None:
    """``d`` as a real directory (0700): a link, file or anything else there is removed."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        d.mkdir(mode=0o700)
        return
    import stat

    if stat.S_ISDIR(st.st_mode):
        return
    os.unlink(d)
    d.mkdir(mode=0o700)


def environment(env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The agent's environment with its home: gemini's state, settings and trusted folders
    there (a ``GEMINI_CLI_TRUSTED_FOLDERS_PATH`` of the user's would point elsewhere), and
    the working folder untrusted (a ``GEMINI_CLI_TRUST_WORKSPACE=true`` of the user's, or
    ``--skip-trust``, would apply the folder's ``.gemini/settings.json``)."""
    out = {k: v for k, v in env.items() if k != "GEMINI_CLI_TRUSTED_FOLDERS_PATH"}
    out["GEMINI_CLI_HOME"] = str(home)
    out["GEMINI_CLI_TRUST_WORKSPACE"] = "false"
    return out


# --------------------------------------------------------------------------- before a turn


def launch_env(
    table: Mapping[str, Any],
    env: dict[str, str],
    cwd: str,
    where: Path,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The agent's environment ``env`` pointing at the session's home ``where``, written
    first (``prepare``: the user's settings from ``environ``'s home, if ``user_settings``);
    ``AgentSetupError`` (one line) if it cannot be."""
    try:
        user: dict[str, Any] = {}
        if table["user_settings"]:
            user = read_user_settings(user_settings_path(environ))
        prepare(where, settings(table, env, user))
    except GeminiSetupError as e:
        raise AgentSetupError(str(e)) from None
    except (OSError, StoreError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise AgentSetupError(f"cannot write the gemini session's home: {why}") from None
    return environment(env, where)
