"""Coming from zwarm 3.x: a ``.zwarm/`` written by the real zwarm 3.10.6 (``zwarm init --yes
--with-project``, ``tests/fixtures/zwarm3/init``, made by ``tests/make_zwarm3_fixtures.py``) is
read by this zwarm: its 3.x settings ignored with one warning naming them, a truly unknown
table still an error, and ``zwarm init --upgrade`` showing what carries over and writing it
only when asked, never applying ``full_danger``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support import ROOT, ZW

ZWARM3 = ROOT / "tests" / "fixtures" / "zwarm3"
WARNING = (
    "ignored zwarm 3.x settings [weave]; [executor]; "
    "[orchestrator] compaction, max_steps_per_turn, parallel_delegations; [watchers]; "
    "`zwarm init --upgrade` shows what carries over"
)


def zwarm3_project(zw: ZW) -> bytes:
    """The state dir (and zwarm.yaml beside it) as zwarm 3.10.6's ``init`` left them; the
    bytes of its config.toml."""
    shutil.copytree(ZWARM3 / "init" / ".zwarm", zw.state_dir)
    shutil.copy(ZWARM3 / "init" / "zwarm.yaml", zw.state_dir.parent / "zwarm.yaml")
    for empty in ("sessions", "orchestrator"):  # 3.10.6 makes them; git keeps no empty dir
        (zw.state_dir / empty).mkdir()
    return (zw.state_dir / "config.toml").read_bytes()


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def test_a_zwarm3_project_spawns_and_reads_with_one_warning_naming_the_3x_settings(
    zw: ZW,
) -> None:
    old = zwarm3_project(zw)
    res = zw.run("spawn", "--wait", "say hello", env_extra=zw.replay("codex_simple"))
    assert res.returncode == 0, res.stderr
    assert "Error" not in res.stderr
    assert warnings(res.stderr) == [f"warning: {zw.state_dir / 'config.toml'}: {WARNING}"]
    sid = res.stdout.split()[0]
    assert zw.meta(sid)["status"] == "completed"
    for args in (
        ["ls"],
        ["ls", "--json"],
        ["show", sid],
        ["show", sid, "--json"],
        ["trajectory", sid],
        ["logs", sid],
        ["wait", sid],
    ):
        r = zw.run(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert "Error" not in r.stderr, (args, r.stderr)
        assert len(warnings(r.stderr)) <= 1, (args, r.stderr)  # once per command, if read
        assert all(WARNING in w for w in warnings(r.stderr)), (args, r.stderr)
    r = zw.run("trajectory", sid)
    assert len(warnings(r.stderr)) == 1  # a command that reads the config says it
    assert (zw.state_dir / "config.toml").read_bytes() == old  # never rewritten by a read


def test_a_truly_unknown_table_or_key_beside_3x_settings_is_still_an_error(zw: ZW) -> None:
    old = zwarm3_project(zw)
    path = zw.state_dir / "config.toml"
    path.write_bytes(old + b"\n[nonsense]\nx = 1\n")
    res = zw.run("spawn", "hello")
    assert res.returncode == 1
    assert res.stderr.startswith("Error: ") and "unknown table [nonsense]" in res.stderr
    assert "Traceback" not in res.stderr
    path.write_bytes(old.replace(b"[orchestrator]\n", b"[orchestrator]\nmax_stepz = 3\n"))
    res = zw.run("spawn", "hello")
    assert res.returncode == 1 and "unknown key 'max_stepz' in [orchestrator]" in res.stderr


def test_init_upgrade_shows_the_mapping_and_writes_only_with_yes(zw: ZW) -> None:
    from zwarm import config as config_mod

    old = zwarm3_project(zw)
    path, backup = zw.state_dir / "config.toml", zw.state_dir / "config.toml.zwarm3"
    for env in ({}, {"CI": "true"}):  # no terminal: shown, never written
        res = zw.run("init", "--upgrade", env_extra=env)
        assert res.returncode == 0, res.stderr
        assert "not written: pass --yes" in res.stdout
        assert path.read_bytes() == old and not backup.exists()
    out = res.stdout
    for line in (
        '[executor] adapter = "codex_mcp" -> [defaults] adapter = "codex"',
        "[executor] timeout = 3600 -> [defaults] timeout = 3600",
        '[executor] sandbox = "workspace-write" -> [codex] sandbox = "workspace-write"',
        'codex.toml model_reasoning_effort = "high" -> [codex] config = '
        '{ model_reasoning_effort = "high" }',
        'codex.toml model = "gpt-5.2-codex" -> [codex] model = "gpt-5.2-codex"',
        'claude.toml model = "sonnet" -> [claude] model = "sonnet"',
        "[orchestrator] parallel_delegations = 4 -> [limits] max_running = 4",
        "[orchestrator.compaction] max_tokens = 100000 -> [orchestrator] context_window = 100000",
        "[orchestrator.compaction] threshold_pct = 0.85 -> [orchestrator] compact_at = 0.85",
        "[orchestrator.compaction] keep_last_n = 10 -> [orchestrator] compact_keep = 10",
        "[weave] (Weave tracing: not part of this zwarm)",
        "[orchestrator] max_steps_per_turn (no counterpart)",
        "../zwarm.yaml",
    ):
        assert line in out, line
    assert "\n[defaults]\n" in out and "\n[limits]\n" in out  # the new file itself is shown

    res = zw.run("init", "--upgrade", "--yes")
    assert res.returncode == 0, res.stderr
    assert backup.read_bytes() == old  # the 3.x config is never lost
    assert "review it with `zwarm trust`" in res.stdout
    new = config_mod.load(path, zw.env)
    assert new.legacy == ()
    d = new.data
    assert (d["defaults"]["adapter"], d["defaults"]["timeout"]) == ("codex", 3600)
    assert d["limits"]["max_running"] == 4
    assert d["orchestrator"]["context_window"] == 100000
    assert (d["orchestrator"]["compact_at"], d["orchestrator"]["compact_keep"]) == (0.85, 10)
    assert (d["codex"]["model"], d["claude"]["model"]) == ("gpt-5.2-codex", "sonnet")
    assert d["codex"]["config"] == {"model_reasoning_effort": "high"}
    assert d["codex"]["dangerous"] is False and d["claude"]["dangerous"] is False

    # the written config is untrusted like any other: codex's -c overrides wait for trust
    res = zw.run("spawn", "hello", env_extra=zw.replay("codex_simple"))
    assert res.returncode == 1 and "trust" in res.stderr and not warnings(res.stderr)
    zw.run("trust", "--yes", check=True)
    sid = zw.spawn("hello", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    argv, _ = zw.recorded()
    assert "--dangerously-bypass-approvals-and-sandbox" not in str(argv)

    # once upgraded, again: refused, the kept 3.x file untouched
    res = zw.run("init", "--upgrade", "--yes")
    assert res.returncode == 1 and "config.toml.zwarm3 already exists" in res.stderr
    assert backup.read_bytes() == old


def test_full_danger_and_an_unsandboxed_3x_sandbox_are_reported_never_applied(zw: ZW) -> None:
    old = zwarm3_project(zw)
    path = zw.state_dir / "config.toml"
    path.write_bytes(old.replace(b'sandbox = "workspace-write"', b'sandbox = "danger-full-access"'))
    res = zw.run("init", "--upgrade", "--yes")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "never applied:" in out
    assert "codex.toml full_danger = true is not applied" in out
    assert "--dangerously-bypass-approvals-and-sandbox" in out
    assert "claude.toml full_danger = true is not applied" in out
    assert "[codex] dangerous = true" in out and "`zwarm trust`" in out
    assert '[executor] sandbox = "danger-full-access" is not applied' in out
    from zwarm import config as config_mod

    d = config_mod.load(path, zw.env).data
    assert d["codex"]["dangerous"] is False and d["claude"]["dangerous"] is False
    assert d["codex"]["sandbox"] == "workspace-write"


def test_upgrade_leaves_out_a_3x_value_zwarm_would_refuse_and_says_why(zw: ZW) -> None:
    old = zwarm3_project(zw)
    path = zw.state_dir / "config.toml"
    path.write_bytes(old.replace(b"parallel_delegations = 4", b"parallel_delegations = -2"))
    res = zw.run("init", "--upgrade", "--yes")
    assert res.returncode == 0, res.stderr
    assert "[orchestrator] parallel_delegations = -2 (not carried over: " in res.stdout
    assert "must not be negative" in res.stdout
    from zwarm import config as config_mod

    assert config_mod.load(path, zw.env).data["limits"]["max_running"] == 0


def test_upgrade_without_3x_settings_and_init_force_on_a_3x_config_refuse(zw: ZW) -> None:
    old = zwarm3_project(zw)
    path = zw.state_dir / "config.toml"
    res = zw.run("init", "--force")  # would rewrite it with the 3.x settings dropped
    assert res.returncode == 1 and "zwarm init --upgrade" in res.stderr
    assert path.read_bytes() == old
    for name in ("codex.toml", "claude.toml", "config.toml"):
        (zw.state_dir / name).unlink()
    zw.run("init", "--yes", check=True)
    res = zw.run("init", "--upgrade")
    assert res.returncode == 1
    assert res.stderr.startswith("Error: no zwarm 3.x settings in ")


def test_every_3x_table_and_key_of_the_real_init_output_is_declared() -> None:
    """``zwarm.legacy_config.ZWARM3`` covers what 3.10.6's ``init`` wrote (uncommented)."""
    import tomllib

    from zwarm import config as config_mod
    from zwarm import legacy_config

    doc = tomllib.loads((ZWARM3 / "init" / ".zwarm" / "config.toml").read_text())
    names = legacy_config.split(doc, config_mod.schema())
    assert names == [
        "[weave]",
        "[executor]",
        "[orchestrator] compaction, max_steps_per_turn, parallel_delegations",
        "[watchers]",
    ]
    assert doc == {"orchestrator": {"max_steps": 50}}  # shared with zwarm: its meaning
    config_mod.validate(doc, "x")


def test_a_3x_key_the_real_source_reads_is_not_unknown(tmp_path: Path) -> None:
    """Keys 3.10.6 reads but its ``init`` leaves commented (``lm``, ``allowed_dirs``,
    ``[orchestrator.tc_compression]``, a top-level ``state_dir``) are recognised too, and
    ignored: ``allowed_dirs = ["*"]`` never widens ``[tools] allowed_roots``."""
    from zwarm import config as config_mod

    path = tmp_path / "config.toml"
    path.write_text(
        'state_dir = ".zwarm"\n[orchestrator]\nlm = "gpt-5"\nallowed_dirs = ["*"]\n'
        'prompt = "p.yaml"\ntools = ["bash"]\n[orchestrator.tc_compression]\nenabled = true\n'
        '[executor]\nadapter = "claude_code"\n'
    )
    c = config_mod.load(path, {})
    assert c.legacy == (
        "state_dir",
        "[executor]",
        "[orchestrator] allowed_dirs, lm, prompt, tc_compression, tools",
    )
    assert c.data["tools"]["allowed_roots"] == ["."]
    assert c.data["orchestrator"]["model"] == ""
    assert c.data["defaults"]["adapter"] == config_mod.defaults().data["defaults"]["adapter"]


def test_upgrade_says_a_truthy_full_danger_and_escapes_the_keys_a_3x_file_has(zw: ZW) -> None:
    """zwarm 3.x ran unsandboxed on any true ``full_danger`` (``"yes"`` too); a key of a 3.x
    file is shown escaped, never a control character on the terminal."""
    zwarm3_project(zw)
    (zw.state_dir / "codex.toml").write_text(
        'model = "gpt-5.2-codex"\nfull_danger = "yes"\n"\\u001b[2Jx" = 1\n'
    )
    res = zw.run("init", "--upgrade")
    assert res.returncode == 0, res.stderr
    assert 'codex.toml full_danger = "yes" is not applied' in res.stdout
    assert "\x1b" not in res.stdout
    assert 'codex.toml "\\u001b[2Jx" (codex -c overrides' in res.stdout
