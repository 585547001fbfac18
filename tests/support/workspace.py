"""Helpers for the workspace tests: real git repositories in temporary directories.

``make_repo``: a git repository (branch ``main``, one commit). ``Repo`` runs git there (argv
only, the test world's environment), and ``Repo.state()`` captures exactly what zwarm must
never touch: the index file's bytes, HEAD, every ref but ``refs/zwarm/``, the stash and the
working tree's status. Sessions change files through the fake agent's ``FAKE_SHELL`` (a shell
command it runs in its working directory: ``agent``, ``spawn``). Must stay true: everything is
under ``tmp_path`` (worktrees go to ``XDG_DATA_HOME``, set there by the root conftest).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import ZW

IDENTITY = ["-c", "user.name=Test User", "-c", "user.email=test@example.com"]


@dataclass
class Repo:
    path: Path
    env: dict[str, str]

    def git(self, *args: str, cwd: Path | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            ["git", *IDENTITY, *args],
            cwd=cwd or self.path,
            env={**self.env, "GIT_OPTIONAL_LOCKS": "0"},  # reading never rewrites the index
            capture_output=True,
            timeout=60,
        )
        if check:
            assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr.decode()}"
        return proc.stdout.decode("utf-8", "replace")

    def write(self, rel: str, text: str | bytes) -> Path:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
        return p

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()

    def state(self, *skip: str) -> dict[str, Any]:
        """What the user owns: index bytes, HEAD, refs (not zwarm's, nor the branches in
        ``skip``), stash, status."""
        index = self.path / ".git" / "index"
        refs = [
            line
            for line in self.git("for-each-ref", "--format=%(refname) %(objectname)").splitlines()
            if not line.startswith("refs/zwarm/") and line.split()[0] not in skip
        ]
        return {
            "index": hashlib.sha256(index.read_bytes()).hexdigest() if index.exists() else None,
            "index_mtime": index.stat().st_mtime_ns if index.exists() else None,
            "HEAD": (self.path / ".git" / "HEAD").read_text(),
            "head": self.git("rev-parse", "HEAD").strip(),
            "refs": refs,
            "stash": self.git("stash", "list"),
            "status": self.git("status", "--porcelain=v1", "-uall"),
        }

    def zwarm_refs(self) -> list[str]:
        """The snapshot refs, in zwarm's snapshot store (and, from an older zwarm, here)."""
        store = self.path / ".git" / "zwarm" / "snapshots.git"
        if not store.is_dir():
            return self.legacy_refs()
        kept = self.git(f"--git-dir={store}", "for-each-ref", "--format=%(refname)", "refs/zwarm/")
        return sorted(kept.split()) + self.legacy_refs()

    def legacy_refs(self) -> list[str]:
        return self.git("for-each-ref", "--format=%(refname)", "refs/zwarm/").split()

    def branches(self) -> list[str]:
        return self.git("for-each-ref", "--format=%(refname:short)", "refs/heads/").split()

    def worktrees(self) -> list[str]:
        out = self.git("worktree", "list", "--porcelain")
        return [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("worktree ")]


def make_repo(path: Path, env: Mapping[str, str]) -> Repo:
    path.mkdir(parents=True)
    r = Repo(path, dict(env))
    r.git("init", "-q", "-b", "main")
    r.write("README.md", "# demo\n")
    r.write("src/app.py", "def main():\n    return 1\n")
    r.write(".gitignore", "*.log\n.env\nnode_modules/\n")
    r.commit("init")
    return r


def agent(shell: str, sample: str = "codex_simple", **extra: str) -> dict[str, str]:
    """``env_extra`` for a fake codex turn that runs ``shell`` in its working directory."""
    from tests.support import SAMPLES

    return {"FAKE_REPLAY": str(SAMPLES / f"{sample}.jsonl"), "FAKE_SHELL": shell, **extra}


def spawn(zw: ZW, repo: Repo, *args: str, shell: str = "true", **extra: str) -> str:
    """``zwarm spawn`` in ``repo`` (more ARGS, e.g. --worktree), waited for; its id."""
    sid = zw.spawn("do the task", "-C", str(repo.path), *args, env_extra=agent(shell, **extra))
    res = zw.wait(sid)
    assert res.returncode in (0, 1), res.stderr
    return sid
