"""Coming from zwarm 3.x: a ``.zwarm/`` written by the real zwarm 3.10.6 (``zwarm init --yes
--with-project``, ``tests/fixtures/zwarm3/init``, made by ``tests/make_zwarm3_fixtures.py``) is
read by this zwarm: its 3.x settings ignored with one warning naming them, a truly unknown
table still an error."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT, ZW

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


def test_every_3x_table_and_key_of_the_real_init_output_is_declared() -> None:
    """``zwarm.legacy.ZWARM3`` covers what 3.10.6's ``init`` wrote (uncommented)."""
    import tomllib

    from zwarm import config as config_mod
    from zwarm import legacy

    doc = tomllib.loads((ZWARM3 / "init" / ".zwarm" / "config.toml").read_text())
    names = legacy.split(doc, config_mod.schema())
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
