"""A sandboxed turn's network (``zwarm.sandbox``, issue 34): its only route out is zwarm's
filtering proxy, given to the agent in ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` (and no
``NO_PROXY``), which reaches by name the hosts allowed (here a local fake, ``fake-llm.test``,
pinned to 127.0.0.1 by the trusted ``[sandbox] resolve``) and refuses, with a line in the turn's
stderr, the rest. An agent ignoring the proxy (``curl --noproxy``, the variables unset, a raw
socket) has no route at all. Real programs: zwarm, bubblewrap, curl and python3 inside."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.support import SAMPLES, ZW
from tests.support.http import serve
from tests.support.workspace import make_repo
from zwarm.sandbox import Policy, bwrap


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[int]:
    with serve(_Ok) as port:
        yield port


def _probes(port: int, other: int) -> dict[str, str]:
    """Each probe prints ``name=ok`` if it reached a server answering 200, else ``name=no``."""
    url = f"http://fake-llm.test:{port}/"
    code = "curl -sS -m 10 -o /dev/null -w '%{http_code}'"
    py = "python3 -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=10)'"
    raw = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)'"
    return {
        # through the proxy, as the agent's CLI goes
        "proxy_http": f'[ "$({code} {url})" = 200 ]',
        "proxy_connect": f'[ "$({code} -p {url})" = 200 ]',  # a CONNECT tunnel (as TLS goes)
        "proxy_python": f"{py} {url}",  # a client reading the variables itself
        # refused by the proxy: a host not allowed, a loopback port not allowed
        "proxy_evil": f'[ "$({code} http://evil.test/)" = 200 ]',
        "proxy_other_port": f'[ "$({code} http://127.0.0.1:{other}/)" = 200 ]',
        # around the proxy: no route
        "noproxy_name": f"curl -sS -m 5 --noproxy '*' {url}",
        "noproxy_addr": f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{port}/",
        "unset_env": f"env -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy {py} {url}",
        "raw_socket": raw,
        "dns": "python3 -c 'import socket; socket.getaddrinfo(\"example.com\", 443)'",
    }


def _script(probes: dict[str, str]) -> str:
    lines = [
        f"if {c} >/dev/null 2>&1; then echo {k}=ok; else echo {k}=no; fi" for k, c in probes.items()
    ]
    env = "env | grep -iE '^[a-z]+_proxy=' | sort > proxyenv.txt"
    return "{ " + env + "; " + "; ".join(lines) + "; } > probes.txt 2>&1"


def test_the_proxy_is_the_only_route_out_of_the_sandbox(zw: ZW, fake: int, tmp_path: Path) -> None:
    repo = make_repo(zw.cwd / "repo", zw.env)
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(
        "[sandbox]\n"
        f'hosts = ["fake-llm.test:{fake}"]\n'
        'resolve = { "fake-llm.test" = "127.0.0.1" }\n'
        f'read_only = ["{SAMPLES}"]\n'
    )
    other = fake + 1 if fake < 65535 else fake - 1
    probes = _probes(fake, other)
    env = {
        "FAKE_RECORD": "",
        "FAKE_SHELL": _script(probes),
        "NO_PROXY": "*",  # the user's: a sandboxed agent never gets it
        **zw.replay("codex_simple"),
    }
    sid = zw.spawn("--shared", "--sandbox", "bwrap", "-C", str(repo.path), "net", env_extra=env)
    assert zw.wait(sid).returncode == 0
    assert zw.json("show", sid)["status"] == "completed"
    text = (repo.path / "probes.txt").read_text()
    got = dict(line.split("=", 1) for line in text.split() if "=" in line)
    expected = {k: "ok" if k.startswith("proxy_") else "no" for k in probes}
    expected.update(proxy_evil="no", proxy_other_port="no")
    assert got == expected, text
    seen = (repo.path / "proxyenv.txt").read_text().split()
    assert sorted(v.split("=")[0] for v in seen) == sorted(
        ["ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY", "all_proxy", "https_proxy", "http_proxy"]
    ), seen
    assert all(v.split("=", 1)[1] == "http://127.0.0.1:3128" for v in seen), seen
    # each refusal is one line in the turn's stderr, saying what was refused and why
    stderr = zw.turn_file(sid, 1, "stderr").read_text()
    refused = [ln for ln in stderr.splitlines() if ln.startswith("zwarm proxy: refused")]
    assert refused == [
        "zwarm proxy: refused GET http://evil.test/: not an allowed host:port",
        f"zwarm proxy: refused GET http://127.0.0.1:{other}/: not an allowed host:port",
    ], stderr


def test_a_bad_hosts_or_resolve_setting_is_one_error_line(zw: ZW) -> None:
    zw.state_dir.mkdir()
    for text, says in [
        ('[sandbox]\nhosts = ["api.example.com"]\n', "must be host:port"),
        ('[sandbox]\nhosts = ["a.test:70000"]\n', "must be host:port"),
        ('[sandbox]\nhosts = ["http://a.test:80"]\n', "must be host:port"),
        ('[sandbox]\nresolve = { "a.test" = "nowhere" }\n', "must be an IP address"),
        ('[sandbox]\nresolve = { "a b" = "127.0.0.1" }\n', "is not a host name"),
    ]:
        zw.write_config(text)
        res = zw.run("spawn", "t")
        assert res.returncode != 0 and says in res.stderr and "Traceback" not in res.stderr, (
            text,
            res.stderr,
        )


def test_zwarm_inside_the_sandbox_says_in_one_line_it_cannot_delegate(zw: ZW) -> None:
    """zwarm's state dir, pins and trust store are hidden inside (by design): the ``zwarm``
    a sandboxed agent finds, as ``$ZWARM`` or on its PATH, says so and exits 2; nothing is
    spawned."""
    repo = make_repo(zw.cwd / "repo", zw.env)
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(f'[sandbox]\nread_only = ["{SAMPLES}"]\n')
    shell = (
        '"$ZWARM" spawn "a child" > out1.txt 2> err1.txt; echo $? > rc1.txt; '
        "zwarm spawn --json child > out2.txt 2> err2.txt; echo $? > rc2.txt"
    )
    env = {"FAKE_RECORD": "", "FAKE_SHELL": shell, **zw.replay("codex_simple")}
    sid = zw.spawn("--shared", "--sandbox", "bwrap", "-C", str(repo.path), "try", env_extra=env)
    assert zw.wait(sid).returncode == 0
    for n in (1, 2):
        assert (repo.path / f"rc{n}.txt").read_text() == "2\n"
        assert (repo.path / f"out{n}.txt").read_text() == ""
        assert (repo.path / f"err{n}.txt").read_text() == bwrap.NO_DELEGATION + "\n"
    assert [r["id"] for r in zw.json("ls")] == [sid]


def test_a_request_made_before_the_proxy_listens_waits_for_it(fake: int, tmp_path: Path) -> None:
    """The agent starts without waiting for the proxy (a Python start): its first request,
    made at once, waits in the forwarder until the proxy listens, and gets through."""
    tree = tmp_path / "tree"
    tree.mkdir()
    policy = Policy(
        cwd=str(tree),
        tree=str(tree),
        home=str(tmp_path / "home"),
        hosts=(f"fake-llm.test:{fake}",),
        pins=("fake-llm.test=127.0.0.1",),
    )
    curl = ["curl", "-sS", "-m", "60", f"http://fake-llm.test:{fake}/"]
    res = subprocess.run(
        bwrap.command(curl, policy, bwrap.bridge_dir()),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tree,
    )
    assert (res.returncode, res.stdout) == (0, "ok\n"), res.stderr
