"""The preflight's cache (``zwarm.sandbox.cache``): a sandboxed spawn after a passing
preflight on this machine, as it still is, skips the probes; ``zwarm sandbox check`` always
runs them and refreshes the cache; a failing preflight is never remembered; and the cache file
is untrusted input (a link, another owner, loose modes, a foreign schema: a miss). Whether the
probes ran is seen on the file itself: a fresh run replaces it (a new inode)."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest

from tests.sandbox.test_preflight import LEAKY, REFUSING, _bwrap
from tests.support import ZW

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed"
)


def _file(zw: ZW) -> Path:
    return Path(zw.env["XDG_CACHE_HOME"]) / "zwarm" / "sandbox-preflight.json"


def _spawn(zw: ZW, env: dict[str, str] | None = None) -> None:
    zw.spawn("--sandbox", "bwrap", "t", env_extra={**zw.replay("codex_simple"), **(env or {})})


def test_a_pass_is_remembered_and_used_until_sandbox_check_refreshes_it(zw: ZW) -> None:
    f = _file(zw)
    _spawn(zw)  # cold: the probes run, the pass is remembered
    st = f.stat()
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
    assert json.loads(f.read_text())["holds"] is True
    _spawn(zw)  # cached: the probes did not run (the file is as it was)
    assert f.stat().st_ino == st.st_ino
    zw.run("sandbox", "check", check=True)  # always fresh, and refreshes it
    assert f.stat().st_ino != st.st_ino


def test_a_failing_preflight_is_never_remembered_and_a_changed_bwrap_misses(zw: ZW) -> None:
    f = _file(zw)
    zw.run("sandbox", "check", check=True)
    assert f.exists()
    # another bwrap on PATH (here one that cannot start): the pass does not count for it
    refusing = _bwrap(zw, REFUSING)
    res = zw.run("spawn", "--sandbox", "bwrap", "t", env_extra=refusing)
    assert res.returncode == 1 and "cannot hold on this machine" in res.stderr, res.stderr
    assert not f.exists()  # the failure removed it
    res = zw.run("sandbox", "check", env_extra=_bwrap(zw, LEAKY))
    assert res.returncode == 1 and not f.exists()
    res = zw.run("spawn", "--sandbox", "bwrap", "t", env_extra=_bwrap(zw, LEAKY))
    assert res.returncode == 1 and "write outside its worktree worked" in res.stderr


@pytest.mark.parametrize("spoil", ["link", "owner", "mode", "schema", "key", "holds"])
def test_a_cache_file_that_is_not_ours_as_written_is_a_miss(zw: ZW, spoil: str) -> None:
    f = _file(zw)
    zw.run("sandbox", "check", check=True)
    good = f.read_text()
    doc = json.loads(good)
    if spoil == "link":  # a link to a passing file: never followed
        real = f.with_name("elsewhere.json")
        f.rename(real)
        f.symlink_to(real)
    elif spoil == "owner":
        os.chown(f, 12345, 12345)
    elif spoil == "mode":
        f.chmod(0o644)
    elif spoil == "schema":
        f.write_text(json.dumps({**doc, "extra": 1}))
    elif spoil == "key":
        doc["key"]["kernel"] = "0.0.0 another kernel"
        f.write_text(json.dumps(doc))
    else:
        f.write_text(good.replace('"holds":true', '"holds":false'))
    before = os.lstat(f).st_ino
    _spawn(zw)  # a miss: the probes run, and the file is written anew
    assert not f.is_symlink() and os.lstat(f).st_ino != before
    assert f.stat().st_uid == os.geteuid() and f.stat().st_mode & 0o777 == 0o600
    assert json.loads(f.read_text()) == json.loads(good)


@pytest.mark.perf
def test_a_sandboxed_spawn_cold_and_cached(zw: ZW) -> None:
    """The time of ``zwarm spawn --sandbox bwrap`` with no pass remembered and with one,
    interleaved in one run (printed: run with ``-s``)."""
    f = _file(zw)
    times: dict[str, list[float]] = {"cold": [], "cached": []}
    for _ in range(5):
        for kind in ("cold", "cached"):
            if kind == "cold":
                f.unlink(missing_ok=True)
            t = time.perf_counter()
            _spawn(zw)
            times[kind].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    cold, cached = med["cold"], med["cached"]
    print(
        f"\nsandboxed spawn, median of 5 (ms): cold {cold:.0f}, cached {cached:.0f} "
        f"(x{cold / cached:.2f}, -{cold - cached:.0f})"
    )
    assert med["cached"] < med["cold"], med
