"""``zwarm mcp install claude|codex``: write an MCP client's own configuration so that a plain
headless run of it (``claude -p``, ``codex exec``) can use every zwarm tool, no flag needed.

Owns what is written for each client and scope, and how those files are merged. For Claude Code
(checked against 2.1.330): the server ``mcpServers.zwarm`` (``.mcp.json`` in the project; the
user config ``~/.claude.json``, or ``$CLAUDE_CONFIG_DIR/.claude.json``, with ``--user``), with
``alwaysLoad`` so its tools are loaded upfront instead of behind Claude's tool search; the allow
rule ``mcp__zwarm__*`` (``.claude/settings.json``, or the user's ``settings.json``), and in the
project ``enabledMcpjsonServers: ["zwarm"]`` (a server of ``.mcp.json`` is not started until
approved). For Codex (0.169.0): ``[mcp_servers.zwarm]`` in ``.codex/config.toml`` (or
``$CODEX_HOME/config.toml``, default ``~/.codex``) with ``default_tools_approval_mode =
"approve"`` for this server only (``codex exec`` refuses a tool call needing approval) and
``required = true`` (codex then waits for the server before the model's first call, so its tools
are registered, and a zwarm that cannot start fails the run instead of silently missing).
The server entry runs the zwarm that ran install (an absolute command) on the state dir pinned
in its environment (codex does not pass an exported ``ZWARM_DIR`` on to a server).

Must stay true:
- nothing written lets a client do more than call zwarm's own tools: no global bypass, no
  ``enableAllProjectMcpServers``, no other server approved, and never the client's trust in a
  project (which would apply every setting the project's files hold): when a project-scope file
  is read only in a trusted project (codex's ``.codex/config.toml``, claude's project
  permissions), install says so and leaves the trust to the user;
- with ``--http`` the ``zwarm serve`` token is never written into a project file (an agent can
  read and write the project): there the client reads it from ``$ZWARM_SERVE_TOKEN``; only a
  user-scope file may hold it, and one that does is left readable by the user alone (0600,
  whatever mode it had); no file is left writable by group or others;
- existing files are merged: every other key (and, for TOML, where possible every comment) is
  kept; a file is read without following a link (a link is refused, never written through),
  replaced atomically, and left alone when nothing changes (install is idempotent); a file that
  does not parse is an error naming it, and nothing is written at all;
- ``plan`` writes nothing (``--print`` shows its snippets); ``apply`` writes what it planned.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zwarm.errors import InvalidInput, StoreError

CLIENTS = ("claude", "codex")
SERVER = "zwarm"
ALLOW_RULE = "mcp__zwarm__*"
TOKEN_VAR = "ZWARM_SERVE_TOKEN"
DEFAULT_HTTP_URL = "http://127.0.0.1:8765/mcp"
_READ_LIMIT = 64 << 20  # ~/.claude.json keeps history: generous, but bounded


@dataclass
class Change:
    """One file install writes: its new content, and what changed in it, as lines."""

    path: Path
    data: bytes | None  # None: unchanged
    lines: list[str]  # ``+ key: value`` / ``~ key: value`` (replaced)
    snippet: str  # what zwarm adds, as the file's format shows it (for --print)
    mode: int = 0o644
    created: bool = False
    in_project: bool = True  # its folder is one an agent can write: a link there is refused


@dataclass
class Plan:
    client: str
    scope: str  # "project" or "user"
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def zwarm_command(argv0: str | None = None) -> list[str]:
    """The zwarm that is running, as an absolute command: its ``zwarm`` script when it was
    started as one, else this Python running ``-m zwarm``."""
    from zwarm.env.python import python_argv

    arg = argv0 if argv0 is not None else sys.argv[0]
    if os.path.basename(arg) == "zwarm" and os.path.isfile(arg):
        return [os.path.abspath(arg)]
    return python_argv(sys.executable, "zwarm")


def plan(
    client: str,
    *,
    user: bool,
    state_dir: Path,
    cwd: Path,
    environ: Mapping[str, str],
    command: list[str],
    http_url: str | None = None,
    printing: bool = False,
) -> Plan:
    """What ``zwarm mcp install CLIENT`` would write (nothing is written here; but for
    ``--http --user``, serve's token is made if there is none, unless only ``printing``)."""
    if client not in CLIENTS:
        raise InvalidInput(f"unknown MCP client {client!r}: choose one of {', '.join(CLIENTS)}")
    if http_url is not None:
        from urllib.parse import urlsplit

        parts = urlsplit(http_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"--http takes an http(s) URL (serve's /mcp), not {http_url!r}")
    result = Plan(client, "user" if user else "project")
    token = None
    if http_url and user:
        token = "TOKEN" if printing else _user_token(environ, state_dir, cwd)
    if client == "claude":
        _plan_claude(result, user, state_dir, cwd, environ, command, http_url, token)
    else:
        _plan_codex(result, user, state_dir, cwd, environ, command, http_url, token)
    for c in result.changes:
        c.in_project = not user
        if not user:
            _refuse_link(c.path.parent)
        c.mode &= ~0o022  # never writable by others, whatever mode the file had
        if token and c.data is not None and token.encode() in c.data:
            c.mode &= ~0o077  # the token: readable by the user alone (a 0644 file kept it)
    if http_url and not user:
        from zwarm.serve.auth import token_path

        result.notes.append(
            f"the client reads the token from ${TOKEN_VAR}: export {TOKEN_VAR}="
            f'"$(cat {token_path(environ, state_dir)})" before starting it'
        )
    return result


def apply(p: Plan) -> None:
    """Write every changed file of ``p`` (atomically, never through a link)."""
    from zwarm.system.files import atomic_write

    for c in p.changes:
        if c.data is None:
            continue
        parent = c.path.parent
        if not parent.is_dir():
            parent.mkdir(parents=True, mode=0o700 if c.mode == 0o600 else 0o755)
        if c.in_project:
            _refuse_link(parent)
        _refuse_link(c.path)
        try:
            atomic_write(c.path, c.data, mode=c.mode)
            os.chmod(c.path, c.mode, follow_symlinks=False)  # whatever the umask
        except FileNotFoundError:
            raise StoreError(f"cannot write {c.path}: its directory is gone") from None
        except OSError as e:
            raise StoreError(f"cannot write {c.path}: {e.strerror}") from None


def describe(p: Plan, printing: bool) -> list[str]:
    """What install wrote (or, ``printing``, would write): per file, then the notes."""
    out: list[str] = []
    for c in p.changes:
        if printing:
            out.append(f"# {c.path}")
            out.extend(c.snippet.rstrip("\n").splitlines())
            out.append("")
            continue
        if c.data is None:
            out.append(f"unchanged {c.path}")
            continue
        out.append(f"{'created' if c.created else 'updated'} {c.path}")
        out.extend(f"  {line}" for line in c.lines)
    out.extend(f"note: {n}" for n in p.notes)
    return out


# ----------------------------------------------------------------------------- Claude Code


def claude_paths(user: bool, cwd: Path, environ: Mapping[str, str]) -> tuple[Path, Path]:
    """(the file holding ``mcpServers``, the settings file) of a scope."""
    if not user:
        return cwd / ".mcp.json", cwd / ".claude" / "settings.json"
    conf = environ.get("CLAUDE_CONFIG_DIR")
    if conf:
        return Path(conf) / ".claude.json", Path(conf) / "settings.json"
    home = _home(environ)
    return home / ".claude.json", home / ".claude" / "settings.json"


def _plan_claude(
    p: Plan,
    user: bool,
    state_dir: Path,
    cwd: Path,
    environ: Mapping[str, str],
    command: list[str],
    http_url: str | None,
    token: str | None,
) -> None:
    servers_path, settings_path = claude_paths(user, cwd, environ)
    entry: dict[str, Any]
    if http_url:
        bearer = f"Bearer {token}" if token else f"Bearer ${{{TOKEN_VAR}}}"
        entry = {"type": "http", "url": http_url, "headers": {"Authorization": bearer}}
    else:
        entry = {
            "type": "stdio",
            "command": command[0],
            "args": [*command[1:], "mcp"],
            "env": {"ZWARM_DIR": str(state_dir)},
        }
    entry["alwaysLoad"] = True  # loaded upfront, not behind Claude's tool search
    mode = 0o600 if user else 0o644
    doc, st = _read_json(servers_path)
    lines: list[str] = []
    servers = _json_table(doc, "mcpServers", servers_path)
    _set(servers, SERVER, entry, "mcpServers", lines)
    p.changes.append(
        _json_change(servers_path, doc, st, lines, {"mcpServers": {SERVER: entry}}, mode)
    )

    doc, st = _read_json(settings_path)
    lines = []
    perms = _json_table(doc, "permissions", settings_path)
    _add(perms, "allow", ALLOW_RULE, "permissions.allow", settings_path, lines)
    snippet: dict[str, Any] = {"permissions": {"allow": [ALLOW_RULE]}}
    if not user:
        _add(doc, "enabledMcpjsonServers", SERVER, "enabledMcpjsonServers", settings_path, lines)
        snippet["enabledMcpjsonServers"] = [SERVER]
    p.changes.append(_json_change(settings_path, doc, st, lines, snippet, mode))
    if not user and not _claude_trusts(cwd, environ):
        p.notes.append(
            f"claude ignores the permissions of {settings_path} until you trust this folder: "
            "run claude here once and accept its trust dialog (or install with --user)"
        )


def _claude_trusts(cwd: Path, environ: Mapping[str, str]) -> bool:
    path, _ = claude_paths(True, cwd, environ)
    try:
        doc, _ = _read_json(path)
    except (InvalidInput, StoreError):
        return False
    projects = doc.get("projects")
    if not isinstance(projects, dict):
        return False
    keys = {str(cwd), os.path.realpath(cwd)}
    return any(
        isinstance(projects.get(k), dict) and projects[k].get("hasTrustDialogAccepted") is True
        for k in keys
    )


# ----------------------------------------------------------------------------- Codex


def codex_path(user: bool, cwd: Path, environ: Mapping[str, str]) -> Path:
    if not user:
        return cwd / ".codex" / "config.toml"
    home = environ.get("CODEX_HOME")
    return (Path(home) if home else _home(environ) / ".codex") / "config.toml"


def _plan_codex(
    p: Plan,
    user: bool,
    state_dir: Path,
    cwd: Path,
    environ: Mapping[str, str],
    command: list[str],
    http_url: str | None,
    token: str | None,
) -> None:
    path = codex_path(user, cwd, environ)
    entry: dict[str, Any]
    if http_url:
        entry = {"url": http_url}
        if token:
            entry["http_headers"] = {"Authorization": f"Bearer {token}"}
        else:
            entry["bearer_token_env_var"] = TOKEN_VAR
    else:
        entry = {
            "command": command[0],
            "args": [*command[1:], "mcp"],
            "env": {"ZWARM_DIR": str(state_dir)},
        }
    entry["default_tools_approval_mode"] = "approve"  # this server's tools only
    entry["required"] = True  # codex waits for it: its tools are there on the first call
    text, st = _read_text(path)
    try:
        doc = tomllib.loads(text) if text is not None else {}
    except tomllib.TOMLDecodeError as e:
        raise InvalidInput(f"{path} is not valid TOML ({e}): fix it; nothing was written") from None
    servers = doc.setdefault("mcp_servers", {})
    if not isinstance(servers, dict):
        raise InvalidInput(f"{path}: mcp_servers is not a table: fix it; nothing was written")
    lines: list[str] = []
    old = servers.get(SERVER)
    _set(servers, SERVER, entry, "mcp_servers", lines)
    snippet = _toml_table(entry)
    mode = 0o600 if user else 0o644
    if not lines:
        data = None
    elif old is None and text is not None and _appendable(text, snippet, doc):
        data = (text + ("" if text.endswith("\n") or not text else "\n") + "\n" + snippet).encode()
    else:
        import tomli_w

        data = tomli_w.dumps(doc).encode()
        if text is not None and "#" in text:
            lines.append(f"(rewritten whole: the comments of {path.name} were not kept)")
    if st is not None:
        mode = st.st_mode & 0o777
    p.changes.append(Change(path, data, lines, snippet, mode, created=st is None))
    if not user and not _codex_trusts(cwd, environ):
        p.notes.append(
            f"codex reads {path} only in a project you trust: run `codex exec --trust` here "
            "once (it trusts all of this project's codex settings), or install with --user"
        )


def _toml_table(entry: dict[str, Any]) -> str:
    import tomli_w

    return tomli_w.dumps({"mcp_servers": {SERVER: entry}})


def _appendable(text: str, snippet: str, want: dict[str, Any]) -> bool:
    """True if ``snippet`` appended to ``text`` (keeping it verbatim, comments and all) reads
    as exactly ``want``."""
    try:
        return tomllib.loads(text.rstrip("\n") + "\n\n" + snippet) == want
    except tomllib.TOMLDecodeError:
        return False


def _codex_trusts(cwd: Path, environ: Mapping[str, str]) -> bool:
    """True if the user's codex config trusts ``cwd``'s project (its git root, or a folder
    between it and ``cwd``)."""
    path = codex_path(True, cwd, environ)
    try:
        text, _ = _read_text(path)
        doc = tomllib.loads(text or "")
    except (InvalidInput, StoreError, tomllib.TOMLDecodeError):
        return False
    projects = doc.get("projects")
    if not isinstance(projects, dict):
        return False
    for d in (cwd, *cwd.parents):
        for key in {str(d), os.path.realpath(d)}:
            entry = projects.get(key)
            if isinstance(entry, dict) and entry.get("trust_level") == "trusted":
                return True
        if os.path.lexists(d / ".git"):
            break
    return False


# ----------------------------------------------------------------------------- files


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    if not home:
        raise InvalidInput("HOME is not set: cannot find the user's client configuration")
    return Path(home)


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise InvalidInput(
            f"{path} is a symbolic link: zwarm does not write through links (see --print)"
        )


def _read_text(path: Path) -> tuple[str | None, os.stat_result | None]:
    """The file's text and stat, or (None, None) if it does not exist; a link, a non-file or
    a file that is not UTF-8 is an error naming it."""
    from zwarm.system.files import NotRegularFile, read_file

    try:
        data, st = read_file(path, _READ_LIMIT)
    except FileNotFoundError:
        return None, None
    except NotRegularFile as e:
        raise InvalidInput(f"{path} {e.strerror}: zwarm does not write through it") from None
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}") from None
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not UTF-8 text: nothing was written") from None


def _read_json(path: Path) -> tuple[dict[str, Any], os.stat_result | None]:
    text, st = _read_text(path)
    if text is None or not text.strip():
        return {}, st
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"{path} is not valid JSON ({e}): fix it; nothing was written") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{path} does not hold a JSON object: nothing was written")
    return doc, st


def _json_table(doc: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    table = doc.setdefault(key, {})
    if not isinstance(table, dict):
        raise InvalidInput(f"{path}: {key} is not an object: fix it; nothing was written")
    return table


def _set(table: dict[str, Any], key: str, value: Any, where: str, lines: list[str]) -> None:
    old = table.get(key)
    if old == value:
        return
    table[key] = value
    mark = "+" if old is None else "~"
    lines.append(f"{mark} {where}.{key} = {json.dumps(value, ensure_ascii=False)}")


def _add(
    table: dict[str, Any], key: str, item: str, where: str, path: Path, lines: list[str]
) -> None:
    items = table.setdefault(key, [])
    if not isinstance(items, list):
        raise InvalidInput(f"{path}: {where} is not a list: fix it; nothing was written")
    if item not in items:
        items.append(item)
        lines.append(f"+ {where}: {json.dumps(item)}")


def _json_change(
    path: Path,
    doc: dict[str, Any],
    st: os.stat_result | None,
    lines: list[str],
    snippet: dict[str, Any],
    mode: int,
) -> Change:
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode() if lines else None
    keep = st.st_mode & 0o777 if st is not None else mode
    text = json.dumps(snippet, indent=2, ensure_ascii=False)
    return Change(path, data, lines, text, keep, created=st is None)


def _user_token(environ: Mapping[str, str], state_dir: Path, cwd: Path) -> str:
    """``zwarm serve``'s token for ``state_dir`` (made now if there is none yet)."""
    from zwarm.serve.auth import load_token

    token, _, _ = load_token(environ, state_dir, cwd)
    return token
