"""Security: trust covers values, and a limit an agent may only tighten (issues 29, 30).

The threat (docs/threat-model.md): an agent can write ``.zwarm/config.toml``
in its working directory. What it must not do with it: loosen a limit that applies to it
(``[limits]``, ``[groups.NAME]``, an agent's ``max_running``, budgets, ``timeout``, prices:
a lower price lets a budget buy more). What it may do: tighten one, or edit a key that limits
nothing, without the user having to trust the file again. Checked here through the installed
CLI and the API:

- each limit: tightened, a spawn just works; raised or removed (a looser default then
  applies), every spawn is refused in one line naming the key, the trusted value and the
  new one, and saying ``zwarm trust`` accepts it (it does); meanwhile every read of the
  limit gets the trusted value, so a scheduler pass or a supervisor never uses the looser;
- an executing key is the trusted value or the default, nothing else;
- a free key edited in a trusted file needs no new trust; a deleted file is the defaults,
  checked all the same; a record of the old format (a hash) keeps working and gains the
  values;
- ``zwarm trust`` shows env values and secrets masked, in its review and its JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.support import wait_status, wait_until
from tests.support.faults import one_error_line, spawn
from zwarm.errors import LoosenedLimit, UntrustedConfig
from zwarm.model import Usage
from zwarm.trust import sha256

pytestmark = pytest.mark.usefixtures("strays")


def trusted(zw: Any, text: str) -> Path:
    """config.toml written and trusted by the user (``zwarm trust``)."""
    zw.state_dir.mkdir(mode=0o700, exist_ok=True)
    path: Path = zw.write_config(text)
    return path


class Case(NamedTuple):
    key: str  # as the refusal names it
    trusted: str  # the config the user trusted
    tighter: str | None  # an edit that tightens it (None: nothing is tighter)
    looser: list[tuple[str, str, str]]  # (config, trusted shown, new shown) refused each
    read: Any  # api -> the value a read of the limit gets
    want: Any  # ...which is the trusted value while the file is looser


def _cap(table: str, key: str, trusted: Any, tighter: Any, looser: Any, default: str) -> Case:
    def text(v: Any) -> str:
        return f"[{table}]\n{key} = {json.dumps(v)}\n"

    return Case(
        f"{table}.{key}",
        text(trusted),
        text(tighter) if tighter is not None else None,
        [
            (text(looser), json.dumps(trusted), json.dumps(looser)),
            ("", json.dumps(trusted), default),
        ],
        lambda api: api.config.get(table, key),
        trusted,
    )


P_TRUSTED = {"input": 2, "cached_input": 1, "output": 20}  # above gpt-5's list price
P_LIST = {"input": 1.25, "cached_input": 0.125, "output": 10.0}


def _prices(p: dict[str, float]) -> str:
    return "[codex.prices.gpt-5]\n" + "".join(f"{k} = {v}\n" for k, v in p.items())


CASES = [
    _cap("limits", "max_running", 4, 2, 8, "0 (no limit) (the default)"),
    _cap("limits", "max_cost", 5, 2, 50, "0 (no limit) (the default)"),
    _cap("limits", "max_tokens", 100000, 50000, 200000, "0 (no limit) (the default)"),
    _cap("limits", "max_cost_per_day", 10, 5, 20, "0 (no limit) (the default)"),
    _cap("limits", "stall_s", 600, 300, 900, "0 (no limit) (the default)"),
    _cap("limits", "on_stall", "kill", None, "mark", '"mark" (the default)'),
    _cap("limits", "max_auto_resumes", 2, 1, 5, "3 (the default)"),
    _cap("limits", "max_spawn_depth", 2, 1, 5, "3 (the default)"),
    _cap("defaults", "timeout", 600, 300, 900, "0 (no limit) (the default)"),
    _cap("codex", "max_running", 3, 1, 6, "0 (no limit) (the default)"),
    _cap("orchestrator", "max_steps", 30, 10, 90, "60 (the default)"),
    _cap("orchestrator", "max_cost_usd", 2, 1, 4, "0 (no limit) (the default)"),
    # an agent's own sandbox or permission mode: removed, the agent's (looser) default applies
    _cap(
        "codex",
        "sandbox",
        "read-only",
        None,
        "danger-full-access",
        '"workspace-write" (the default)',
    ),
    _cap(
        "claude",
        "permission_mode",
        "default",
        "plan",
        "bypassPermissions",
        '"acceptEdits" (the default)',
    ),
    _cap("gemini", "approval_mode", "default", "plan", "yolo", '"auto_edit" (the default)'),
    Case(
        "codex.dangerous",
        "[codex]\ndangerous = false\n",
        None,
        [("[codex]\ndangerous = true\n", "false", "true")],
        lambda api: api.config.get("codex", "dangerous"),
        False,
    ),
    Case(
        "groups.g.max_running",
        "[groups.g]\nmax_running = 2\n",
        "[groups.g]\nmax_running = 1\n",
        [("[groups.g]\nmax_running = 4\n", "2", "4"), ("", "2", "0 (no limit)")],
        lambda api: api.config.groups()["g"]["max_running"],
        2,
    ),
    Case(  # a group's budget left unset is [limits]'s: raising that loosens the group too
        "groups.g.max_cost",
        "[limits]\nmax_cost = 1\n[groups.g]\nmax_cost = 3\n",
        "[limits]\nmax_cost = 1\n[groups.g]\nmax_cost = 2\n",
        [
            ("[limits]\nmax_cost = 1\n[groups.g]\nmax_cost = 9\n", "3", "9"),
            ("", "3", "0 (no limit)"),
        ],
        lambda api: api.config.groups()["g"]["max_cost"],
        3,
    ),
    Case(  # lowered, or removed so that the (lower) list price applies
        "codex.prices.gpt-5",
        _prices(P_TRUSTED),
        _prices({**P_TRUSTED, "output": 30}),
        [
            (_prices({**P_TRUSTED, "input": 1.5}), json.dumps(P_TRUSTED), '{"input": 1.5, "cac'),
            ("", json.dumps(P_TRUSTED), json.dumps(P_LIST)),
        ],
        lambda api: api.config.table("codex")["prices"],
        {"gpt-5": P_TRUSTED},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_a_limit_is_tightened_freely_and_loosened_only_by_trust(zw: Any, case: Case) -> None:
    env = zw.replay("codex_simple")
    cfg = trusted(zw, case.trusted)
    if case.tighter is not None:
        cfg.write_text(case.tighter)  # as an agent (or the user) would: no new trust
        wait_status(zw, spawn(zw, "tightened", env=env), "completed")
    for text, was, new in case.looser:
        cfg.write_text(text)
        want = f"{cfg}: {case.key} = {new}"
        fix = f"loosens the trusted {was}"
        accepts = f"`zwarm --state-dir {zw.state_dir} trust` accepts it"
        one_error_line(zw.run("spawn", "t", env_extra=env), want, fix, accepts)
        api = zw.api(env)
        with pytest.raises(LoosenedLimit) as e:
            api.spawn("t")
        assert e.value.key == case.key and e.value.path == str(cfg)
        assert case.read(api) == case.want  # every read: never the looser value
    assert zw.calls() == (1 if case.tighter is not None else 0)
    zw.run("trust", "--yes", check=True)  # accepts the last one (the key removed)
    wait_status(zw, spawn(zw, "accepted", env=env), "completed")


def test_a_loosened_cap_is_never_used_by_a_scheduler_pass(zw: Any) -> None:
    """The agent raises max_running while a session waits for a slot: the pass every
    command runs first (here ``ls``) still counts the trusted cap, and keeps it queued."""
    env = zw.replay("codex_simple")
    cfg = trusted(zw, "[limits]\nmax_running = 1\n")
    hold = zw.tmp / "hold"
    hold.touch()
    first = spawn(zw, "first", env={**env, **zw.gated(hold)})
    wait_until(lambda: zw.meta(first)["turns"][0].get("agent"), message="first running")
    second = spawn(zw, "second", env=env)
    assert zw.meta(second)["status"] == "queued"
    cfg.write_text("[limits]\nmax_running = 5\n")
    for _ in range(2):
        zw.run("ls", check=True)
        assert zw.meta(second)["status"] == "queued"
    hold.unlink()
    wait_status(zw, first, "completed")
    wait_status(zw, second, "completed")  # started when the trusted cap let it


def test_a_lowered_price_never_lowers_a_cost_estimate(zw: Any) -> None:
    cfg = trusted(zw, _prices(P_TRUSTED))
    cfg.write_text(_prices({"input": 0, "cached_input": 0, "output": 0}))
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert zw.api().manager("codex").estimate_cost(usage, "gpt-5") == pytest.approx(22.0)
    free = _prices({"input": 0, "cached_input": 0, "output": 0}).replace("gpt-5", "x")
    cfg.write_text(_prices(P_TRUSTED) + free)  # a model with no price before: counted as 0
    assert zw.api().manager("codex").estimate_cost(usage, "x") == 0
    zw.run("spawn", "t", env_extra=zw.replay("codex_simple"), check=True)


def test_editing_free_keys_of_a_trusted_file_needs_no_new_trust(zw: Any) -> None:
    """Issue 30: a trusted file (an agent env set) edited where nothing executes or loosens
    (a limit lowered, on_usage_limit, a summary size, a comment) keeps working."""
    env = zw.replay("codex_simple")
    cfg = trusted(zw, '[codex.env]\nFOO = "bar"\n[limits]\nmax_running = 4\n')
    cfg.write_text(
        '# edited\n[codex.env]\nFOO = "bar"\n[limits]\nmax_running = 1\non_usage_limit = "wait"\n'
        "[summary]\nbudget_chars = 1000\n"
    )
    sid = spawn(zw, "t", env=env)
    assert wait_status(zw, sid, "completed")
    env_seen = json.loads(next(zw.record.glob("env*.json")).read_text())
    assert env_seen.get("FOO") == "bar"
    out = zw.run("trust", "--yes", check=True).stdout  # the review says so too
    assert "(edited since trusted: nothing in it needs new trust)" in out
    assert "  limits.max_running = 1  (trusted: 4)" in out.splitlines()
    cfg.write_text('[codex.env]\nFOO = "other"\n')  # an executing value: refused
    one_error_line(zw.run("spawn", "t", env_extra=env), "changed since you trusted it", "codex.env")


def test_an_executing_key_is_its_trusted_value_or_the_default(zw: Any) -> None:
    """An executing key may be the value trusted for it, or the built-in default; any other
    value is refused, also where the trusted record holds a value for it."""
    cfg = trusted(zw, '[tools]\nallowed_roots = ["./sub"]\n')
    assert zw.api().config.get("tools", "allowed_roots") == ["./sub"]
    cfg.write_text('[tools]\nallowed_roots = ["/"]\n')
    with pytest.raises(UntrustedConfig, match=r"tools\.allowed_roots") as e:
        zw.api().config.get("tools", "allowed_roots")
    assert e.value.changed and e.value.keys == ["tools.allowed_roots"]
    cfg.write_text("")
    assert zw.api().config.get("tools", "allowed_roots") == ["."]


def test_a_deleted_config_is_the_defaults_checked_all_the_same(zw: Any) -> None:
    env = zw.replay("codex_simple")
    cfg = trusted(zw, "[limits]\nmax_spawn_depth = 2\n")
    cfg.unlink()
    one_error_line(
        zw.run("spawn", "t", env_extra=env), "limits.max_spawn_depth = 3 (the default)", "trust"
    )
    out = zw.run("trust", "--yes", check=True).stdout
    assert "which does not exist" in out and "limits.max_spawn_depth = (the default)" in out
    wait_status(zw, spawn(zw, "t", env=env), "completed")


def test_an_old_format_record_keeps_working_and_gains_the_values(
    zw: Any, private_trust: Path
) -> None:
    """A trust file of version 1 (a hash per file): the file it hashed is trusted with all
    its values, and the record gains them, so a later edit of a free key needs no trust."""
    env = zw.replay("codex_simple")
    text = '[codex.env]\nFOO = "bar"\n[limits]\nmax_running = 4\n'
    zw.state_dir.mkdir(mode=0o700, exist_ok=True)
    cfg = zw.state_dir / "config.toml"
    cfg.write_text(text)
    private_trust.parent.mkdir(parents=True)
    entry = {"sha256": sha256(text.encode()), "trusted_at": "2026-01-01T00:00:00.000+00:00"}
    private_trust.write_text(
        json.dumps({"version": 1, "configs": {str(cfg): entry}, "state_dirs": {}})
    )
    private_trust.chmod(0o600)
    wait_status(zw, spawn(zw, "t", env=env), "completed")
    saved = json.loads(private_trust.read_text())["configs"][str(cfg)]
    assert saved["values"] == {"codex": {"env": {"FOO": "bar"}}, "limits": {"max_running": 4}}
    assert saved["sha256"] == entry["sha256"] and saved["trusted_at"] == entry["trusted_at"]
    cfg.write_text(text + "[summary]\nfull_turns = 1\n")
    wait_status(zw, spawn(zw, "t", env=env), "completed")
    cfg.write_text(text.replace("= 4", "= 9"))
    one_error_line(zw.run("spawn", "t", env_extra=env), "limits.max_running = 9", "trusted 4")


SECRET = "sk-ant-api03-0123456789abcdef"


def test_trust_shows_env_values_and_secrets_masked(zw: Any) -> None:
    zw.state_dir.mkdir(mode=0o700)
    cfg = zw.state_dir / "config.toml"
    cfg.write_text(
        f'[claude.env]\nANTHROPIC_API_KEY = "{SECRET}"\nKEY_REF = "$MY_KEY"\nSHORT = "ab"\n'
        f'MID = "abcdefg"\n[gemini.settings.security.auth]\napiKey = "{SECRET}"\n'
    )
    res = zw.run("trust", "--yes", check=True)
    assert SECRET not in res.stdout + res.stderr
    want = '{"ANTHROPIC_API_KEY": "sk-a…", "KEY_REF": "$MY_KEY", "SHORT": "ab", "MID": "…"}'
    assert f"  claude.env = {want}" in res.stdout.splitlines()
    assert '"apiKey": "sk-a…"' in res.stdout
    doc = zw.json("trust", "--yes")
    assert SECRET not in json.dumps(doc)
    assert doc["config"]["settings"]["claude.env"]["ANTHROPIC_API_KEY"] == "sk-a…"
    cfg.write_text(cfg.read_text().replace(SECRET, SECRET[::-1]))  # the review's diff too
    out = zw.run("trust", "--yes", check=True).stdout
    assert SECRET not in out and SECRET[::-1] not in out
    assert '(trusted: {"ANTHROPIC_API_KEY": "sk-a…"' in out and '"fedc…"' in out
