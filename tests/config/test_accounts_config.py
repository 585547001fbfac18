"""``[accounts.<agent>.<name>]`` under the config's rules (``zwarm.config``, ``zwarm.trust``):
its shape checked in one line; its ``env`` executes (used only as trusted: it picks a login,
a secret goes with it), its ``max_running`` and ``budget_daily`` are limits (tightened freely,
loosened only by trust, the trusted value used meanwhile), its ``priority`` is free; ``zwarm
trust`` shows its env masked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_status
from tests.support.faults import one_error_line
from zwarm import config
from zwarm.errors import ConfigError, LoosenedLimit, UntrustedConfig

pytestmark = pytest.mark.usefixtures("strays")

BASE = '[accounts.claude.A]\nenv = { ACCT = "A" }\nmax_running = 2\nbudget_daily = 5.0\n'


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[accounts.nope.A]\n", "[accounts.nope]: not an installed agent"),
        ("[accounts.claude.A]\ncolour = 1\n", "unknown key 'colour' in [accounts.claude.A]"),
        ("[accounts.claude.A]\nmax_running = -1\n", "accounts.claude.A.max_running must be a"),
        ("[accounts.claude.A]\nenv = { 1X = 'a' }\n", "accounts.claude.A.env.1X must be a string"),
        ("[accounts.claude.A]\npriority = 1.5\n", "accounts.claude.A.priority must be a whole"),
        ('[accounts.claude."a b"]\n', "account name 'a b': use letters"),
        ("[accounts]\nclaude = 3\n", "accounts.claude must be a table"),
    ],
)
def test_a_bad_account_is_one_config_error(text: str, problem: str) -> None:
    import tomllib

    with pytest.raises(ConfigError) as e:
        config.validate(tomllib.loads(text), "c.toml")
    assert problem in str(e.value), str(e.value)


def test_an_accounts_env_is_used_only_as_trusted_and_its_limits_only_tightened(zw: Any) -> None:
    zw.state_dir.mkdir(mode=0o700)
    cfg: Path = zw.write_config(BASE)
    env = zw.replay("claude_simple")
    # tighter caps, another priority: no new trust needed
    cfg.write_text(BASE.replace("max_running = 2", "max_running = 1") + "priority = 9\n")
    sid = zw.run("spawn", "t", "--adapter", "claude", env_extra=env, check=True).stdout.strip()
    assert wait_status(zw, sid, "completed")["account"] == "A"
    # a looser cap: refused in one line, the trusted value read meanwhile
    for old, new in (("max_running = 2", "max_running = 0"), ("budget_daily = 5.0", "")):
        cfg.write_text(BASE.replace(old, new))
        res = zw.run("spawn", "t", "--adapter", "claude", env_extra=env)
        key, was = old.split(" = ")
        want = f"{cfg}: accounts.claude.A.{key} = 0 (no limit) loosens the trusted {was}"
        one_error_line(res, want, "trust` accepts it")
        with pytest.raises(LoosenedLimit):
            zw.api(env).spawn("t", adapter="claude")
        assert zw.api(env).config.accounts("claude")["A"][key] == (2 if "running" in key else 5.0)
    # another env: every turn on that account is refused until trusted
    cfg.write_text(BASE.replace('ACCT = "A"', 'ACCT = "A", LOGIN = "tok-planted-1234"'))
    api = zw.api(env)
    with pytest.raises(UntrustedConfig, match=r"accounts\.claude\.A\.env"):
        api.config.account_env("claude", "A")
    res = zw.run("trust")  # the review, without a terminal to confirm on: the env masked
    assert res.returncode == 1 and '"LOGIN": "tok-…"' in res.stdout, res.stdout
    assert "tok-planted-1234" not in res.stdout + res.stderr
    out = zw.run("trust", "--yes", check=True).stdout
    assert "tok-planted-1234" not in out and "tok-…" in out, out
    env_now = zw.api(env).config.account_env("claude", "A")
    assert env_now == {"ACCT": "A", "LOGIN": "tok-planted-1234"}
