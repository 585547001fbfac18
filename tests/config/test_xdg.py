"""One resolver of zwarm's per-user directories (``xdg.xdg_dir``): every module that keeps a
file per user finds it by the same rule, relative values (of an XDG variable or of HOME)
ignored, as they would name a directory of the project zwarm runs in."""

import os
import pwd
from pathlib import Path

import pytest

from zwarm.engine.workspace import default_root, root_of
from zwarm.serve.auth import token_dir
from zwarm.store.pins import pins_dir
from zwarm.store.rowcache import location
from zwarm.trust import trust_file
from zwarm.xdg import user_state_dir, xdg_dir, xdg_runtime_dir

pytestmark = pytest.mark.unit


def _all(env: dict[str, str], tmp: Path) -> dict[str, Path]:
    st = os.stat(tmp)
    return {
        "config": trust_file(env).parent,
        "state": pins_dir(env).parent,
        "launchers": user_state_dir(env),
        "data": default_root(env).parent,
        "cache": location(env, st).parent.parent,
        "serve": token_dir(env).parent,
    }


def test_absolute_xdg_values_are_used(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "c"),
        "XDG_STATE_HOME": str(tmp_path / "s"),
        "XDG_DATA_HOME": str(tmp_path / "d"),
        "XDG_CACHE_HOME": str(tmp_path / "k"),
    }
    got = _all(env, tmp_path)
    assert got["config"] == tmp_path / "c" / "zwarm"
    assert got["state"] == got["launchers"] == got["serve"] == tmp_path / "s" / "zwarm"
    assert got["data"] == tmp_path / "d" / "zwarm"
    assert got["cache"] == tmp_path / "k" / "zwarm"


@pytest.mark.parametrize("xdg", ["", "relative/dir"])
def test_defaults_under_home(tmp_path: Path, xdg: str) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": xdg}
    env |= {v: xdg for v in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME")}
    env["XDG_CACHE_HOME"] = xdg
    got = _all(env, tmp_path)
    assert got["config"] == home / ".config" / "zwarm"
    assert got["state"] == got["launchers"] == got["serve"] == home / ".local/state/zwarm"
    assert got["data"] == home / ".local/share/zwarm"
    assert got["cache"] == home / ".cache/zwarm"
    assert xdg_runtime_dir(env) is None


def test_relative_home_is_ignored_everywhere(tmp_path: Path) -> None:
    """A relative HOME is not a home (it would name a directory of the project): every
    per-user dir falls back to the password database's home, as the trust file always did."""
    real = pwd.getpwuid(os.geteuid()).pw_dir
    got = _all({"HOME": "project/dir"}, tmp_path)
    for name, path in got.items():
        assert path.is_absolute() and str(path).startswith(real), (name, path)
    assert root_of("~/wt", {"HOME": "project/dir"}) == Path(os.path.realpath(real)) / "wt"


def test_runtime_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(run), "HOME": str(tmp_path)}
    assert xdg_runtime_dir(env) == run / "zwarm"
    assert token_dir(env) == run / "zwarm"
    run.chmod(0o755)  # not private: serve's tokens go to the state dir
    assert token_dir(env) == xdg_dir(env, "XDG_STATE_HOME") / "serve"
