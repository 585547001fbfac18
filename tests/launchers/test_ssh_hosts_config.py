"""``[hosts.NAME]``: the ssh hosts' config, a launcher-declared family of named tables.

The family (``zwarm.launchers.ssh.hosts.HOSTS``) goes through ``zwarm.config`` as any
launcher's table does: shapes checked when the file is read (one line naming the file and the
key), each host trusted whole (every key of a host decides what runs, where), the ssh
destination never an ssh option. The schema here is zwarm's plus the family, as
``config.schema()`` makes it once the ssh launcher declares it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zwarm import config, config_text
from zwarm.errors import ConfigError, InvalidInput, UntrustedConfig, ZwarmError
from zwarm.launchers.ssh.hosts import (
    HOSTS,
    Connection,
    HomePath,
    Host,
    host,
    hosts,
    private_dir,
    remote_line,
)
from zwarm.trust_plan import trust_config

pytestmark = pytest.mark.unit


def tables() -> dict[str, dict[str, Any]]:
    return {**config.schema(), "hosts": config.family_spec(HOSTS)}


def load(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return config.load(path, tables=tables())


def trust(tmp_path: Path) -> None:
    trust_config(tmp_path / "config.toml", tables=tables())


@pytest.fixture
def short() -> Iterator[Path]:
    """A directory on a path short enough for control sockets (pytest's are too long)."""
    d = Path(tempfile.mkdtemp(prefix="zwcm-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


A = '[hosts.a]\nssh = "me@box"\nport = 2222\nidentity = "~/.ssh/id_box"\ncwd = "~/src/app"\n'


def test_a_host_reads_back_as_trusted(tmp_path: Path) -> None:
    cfg = load(tmp_path, A + '[hosts.b-2]\nssh = "alias"\nzwarm = "/opt/zwarm/bin/zwarm"\n')
    trust(tmp_path)
    got = hosts(load(tmp_path, A + '[hosts.b-2]\nssh = "alias"\nzwarm = "/opt/zwarm/bin/zwarm"\n'))
    assert got == {
        "a": Host("a", "me@box", 2222, "~/.ssh/id_box", None, "zwarm", "~/src/app"),
        "b-2": Host("b-2", "alias", zwarm="/opt/zwarm/bin/zwarm"),
    }
    assert cfg.data["hosts"]["a"] == {
        "ssh": "me@box",
        "port": 2222,
        "identity": "~/.ssh/id_box",
        "cwd": "~/src/app",
    }


def test_no_hosts_is_none(tmp_path: Path) -> None:
    assert hosts(load(tmp_path, "")) == {}
    assert hosts(config.defaults()) == {}  # no launcher declares [hosts]: none either
    with pytest.raises(InvalidInput, match=r"unknown host 'x'.*none configured"):
        host(load(tmp_path, ""), "x")


def test_an_untrusted_host_is_refused_until_trusted(tmp_path: Path) -> None:
    cfg = load(tmp_path, A)
    with pytest.raises(UntrustedConfig, match=r"hosts\.a"):
        hosts(cfg)
    trust(tmp_path)
    assert hosts(load(tmp_path, A))["a"].ssh == "me@box"
    # any key of a trusted host changed: the host needs trust again, whole
    changed = A.replace("port = 2222", "port = 2223")
    with pytest.raises(UntrustedConfig, match=r"hosts\.a"):
        hosts(load(tmp_path, changed))
    # a host added to a trusted file: only it is refused; the others are read alone
    more = A + '[hosts.evil]\nssh = "attacker@example.org"\n'
    cfg = load(tmp_path, more)
    assert host(cfg, "a").port == 2222
    with pytest.raises(UntrustedConfig, match=r"hosts\.evil"):
        host(cfg, "evil")
    assert [c.key for c in cfg.source.pending()] == ["hosts.evil"]  # type: ignore[union-attr]
    # a host taken out of a trusted file loosens nothing
    two = A + '[hosts.b]\nssh = "b@box"\n'
    load(tmp_path, two)
    trust(tmp_path)
    fewer = load(tmp_path, A + "# b went away\n")
    assert fewer.source.pending() == []  # type: ignore[union-attr]
    assert list(hosts(fewer)) == ["a"]


def test_trust_shows_each_host_as_one_value(tmp_path: Path) -> None:
    data = config.validate(tomllib.loads(A), "x", tables())
    shown = config.Judge(tables()).settings(data)
    assert shown == {"hosts.a": data["hosts"]["a"]}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[hosts.A]\nssh = "x"\n', r"\[hosts\.A\]: a name is a-z"),
        ('[hosts.1a]\nssh = "x"\n', r"\[hosts\.1a\]: a name is"),
        ("[hosts.a]\nport = 22\n", r"\[hosts\.a\] needs ssh"),
        ('[hosts.a]\nssh = "x"\nuser = "me"\n', r"unknown key 'user' in \[hosts\.a\]"),
        ('[hosts.a]\nssh = "x"\nport = "22"\n', r"hosts\.a\.port must be an integer"),
        ('[hosts.a]\nssh = "x"\nport = 0\n', r"hosts\.a\.port must be from 1 to 65535"),
        ('[hosts.a]\nssh = "x"\nport = 70000\n', r"hosts\.a\.port must be from 1 to 65535"),
        ('[hosts.a]\nssh = "x"\nidentity = "id_rsa"\n', r"hosts\.a\.identity must be an abs"),
        ('[hosts.a]\nssh = "x"\nssh_config = "cfg"\n', r"hosts\.a\.ssh_config must be an abs"),
        ('[hosts.a]\nssh = "x"\ncwd = "src"\n', r"hosts\.a\.cwd must be an absolute"),
        ('[hosts.a]\nssh = "x"\nzwarm = "./zwarm"\n', r"hosts\.a\.zwarm must be a program"),
        ('[hosts.a]\nssh = "x"\nzwarm = "-c"\n', r"hosts\.a\.zwarm must be a program"),
        ("[hosts]\na = 1\n", r"hosts\.a must be a table"),
        # option injection into ssh's argv: a destination is never an option
        ('[hosts.a]\nssh = "-oProxyCommand=touch /tmp/x"\n', r"hosts\.a\.ssh must be an ssh dest"),
        ('[hosts.a]\nssh = "-F/tmp/evil"\n', r"hosts\.a\.ssh must be an ssh destination"),
        ('[hosts.a]\nssh = "box -oProxyCommand=x"\n', r"hosts\.a\.ssh must be an ssh dest"),
        ('[hosts.a]\nssh = "box\\n"\n', r"hosts\.a\.ssh must be an ssh destination"),
        ('[hosts.a]\nssh = ""\n', r"hosts\.a\.ssh must be an ssh destination"),
    ],
)
def test_bad_hosts_are_one_line_errors(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as e:
        load(tmp_path, text)
    assert str(tmp_path / "config.toml") in str(e.value) and "\n" not in str(e.value)


def test_a_mapping_is_checked_too() -> None:
    """``hosts`` of a mapping (the members as a launcher was handed them) checks their shape
    again: a destination that is an option never reaches ssh, however it came."""
    with pytest.raises(ConfigError, match="must be an ssh destination"):
        hosts({"a": {"ssh": "-oProxyCommand=sh"}})
    with pytest.raises(ConfigError, match="needs ssh"):
        hosts({"a": {}})


def test_argv_ends_ssh_options_before_the_destination(short: Path) -> None:
    h = Host("a", "me@box", port=2200, identity="/k/id", ssh_config="~/cfg")
    conn = Connection(h, short / "cm")
    argv = conn.argv(["echo", "$(id)", "a b;c"], cwd="~/my dir")
    assert argv[0] == "ssh" and argv[-3:-1] == ["--", "me@box"]
    assert argv[argv.index("-F") + 1] == os.path.expanduser("~/cfg")
    assert argv[argv.index("-p") + 1] == "2200" and argv[argv.index("-i") + 1] == "/k/id"
    assert f"ControlPath={short / 'cm'}/%C" in argv and "BatchMode=yes" in argv
    assert "-T" in argv and "-tt" not in argv
    # the remote line: each word quoted; only a host path's ~/ is left to the remote shell
    assert argv[-1] == "cd -- ~/'my dir' && exec echo '$(id)' 'a b;c'"
    assert "-tt" in conn.argv(["true"], tty=True)
    assert (
        remote_line([HomePath("~/bin/zwarm"), "~/x", "--version"]) == "~/bin/zwarm '~/x' --version"
    )
    assert remote_line([HomePath("~"), HomePath("/abs/z")]) == "~ /abs/z"


def test_the_control_dir_is_private_and_short(short: Path, tmp_path: Path) -> None:
    d = private_dir(short / "cm")
    assert (d.stat().st_mode & 0o777) == 0o700
    open_dir = short / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    with pytest.raises(ZwarmError, match="not a private directory"):
        private_dir(open_dir)
    link = short / "link"
    link.symlink_to(d)
    with pytest.raises(ZwarmError, match="not a private directory"):
        private_dir(link)
    with pytest.raises(ZwarmError, match="too long a path"):
        private_dir(tmp_path / ("x" * 80))


def test_init_shows_an_example_and_parses_back(tmp_path: Path) -> None:
    cfg = load(tmp_path, A)
    text = config_text.commented(cfg, tables())
    assert "# For example ([hosts.a]; a key left out is unset):" in text
    assert '#   a = { ssh = "me@build-box", port = 22, ' in text
    assert "# ssh: Where to connect" in text
    assert config.validate(tomllib.loads(text), "x", tables()) == cfg.data
    empty = config_text.commented(config.Config(config._defaults(tables())), tables())
    assert config.validate(tomllib.loads(empty), "x", tables())["hosts"] == {}
