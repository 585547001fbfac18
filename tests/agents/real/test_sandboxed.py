"""The real ``codex``, ``claude`` and ``gemini`` in zwarm's own sandbox (``zwarm.sandbox``, issue
34), against the fake LLMs: a normal turn works (a shell command, a file written in its working
directory), reaching the fake through the port bridge, with the agent's own sandbox standing down
inside zwarm's (claude told so by IS_SANDBOX), under the turn's limits; and each reaches an
endpoint configured BY NAME (``http://fake-llm.test:PORT``, pinned to the fake by the trusted
``[sandbox] resolve``: no port is bridged, the sandbox has no DNS) only through zwarm's filtering
proxy, which the CLI finds in ``HTTPS_PROXY``/``HTTP_PROXY`` as it would a real API's
``https://`` host (TLS itself is not exercised offline)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import pytest

from tests.fakes.llm import Reply, shell, text, write_file
from tests.support.real import RealWorld, shell_args, wait_until

FAKE_HOST = "fake-llm.test"


def test_a_sandboxed_turn_works_with_the_real_cli(real: RealWorld, adapter: str) -> None:
    target = real.work / "hello.txt"
    path = "hello.txt" if adapter == "codex" else str(target)
    script = [
        Reply([shell("echo from-inside > seen.txt")]),
        Reply([write_file(path, "written in the sandbox\n")]),
        Reply([text("Done.")]),
        Reply([text("Again.")]),
    ]
    srv = real.use(adapter, script, **shell_args(adapter))
    # codex's endpoint is in its -c config, not a *_BASE_URL variable: allowed by port; the
    # turn under limits (zwarm.sandbox.limits) a real CLI works within
    real.tables["sandbox"] = {"ports": [srv.port], "memory": "2G", "cpus": 1, "pids": 512}
    real.write_config()
    sid = real.spawn("Write the files.", adapter, sandbox="bwrap")
    d = real.wait(sid)
    assert (d["status"], d["last_message"], d["sandbox"]) == ("completed", "Done.", "bwrap"), d
    assert target.read_text() == "written in the sandbox\n"
    assert (real.work / "seen.txt").read_text() == "from-inside\n"
    assert d["dangerous"] is False
    limits = d["turns_detail"][0]["limits"]
    assert "memory 2G via" in limits and "cpus 1 via" in limits and "pids 512 via" in limits
    # a follow-up resumes the agent's own session (its login/state dir writable inside)
    real.api().inject(sid, "Once more.", context="native")
    d = real.wait(sid)
    t2 = d["turns_detail"][1]
    assert (d["status"], d["last_message"], t2["context"]) == ("completed", "Again.", "native"), d


def test_a_sandboxed_gemini_turn_works_and_resumes(real: RealWorld) -> None:
    """gemini's home of its own lies in the (hidden) state dir: bound back in as its login."""
    script = [
        Reply([write_file(str(real.work / "g.txt"), "from gemini\n")]),
        Reply([text("First.")]),
        Reply([text("Second.")]),
    ]
    real.use("gemini", script)  # its endpoint: GOOGLE_GEMINI_BASE_URL, bridged by its port
    sid = real.spawn("Write it.", "gemini", sandbox="bwrap")
    d = real.wait(sid)
    assert (d["status"], d["last_message"], d["sandbox"]) == ("completed", "First.", "bwrap"), d
    assert (real.work / "g.txt").read_text() == "from gemini\n"
    real.api().inject(sid, "Again.", context="native")
    d = real.wait(sid)
    assert (d["status"], d["last_message"]) == ("completed", "Second."), d


def _by_name(value: Any) -> Any:
    """``value`` (an agent's config table) with the fake's 127.0.0.1 named ``FAKE_HOST``."""
    if isinstance(value, dict):
        return {k: _by_name(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_by_name(v) for v in value]
    if isinstance(value, str) and value.startswith("http://127.0.0.1:"):
        return value.replace("127.0.0.1", FAKE_HOST, 1)
    return value


@pytest.mark.parametrize("name", ["codex", "claude", "gemini"])
def test_a_sandboxed_cli_reaches_its_endpoint_by_name_only_through_the_proxy(
    real: RealWorld, name: str
) -> None:
    path = "p.txt" if name == "codex" else str(real.work / "p.txt")
    script = [Reply([write_file(path, "through the proxy\n")]), Reply([text("Proxied.")])]
    srv = real.use(name, script, **(shell_args(name) if name != "gemini" else {}))
    setup = real.agents[name]
    setup.table = _by_name(setup.table)
    real.tables["sandbox"] = {"resolve": {FAKE_HOST: "127.0.0.1"}}
    real.write_config()
    assert FAKE_HOST in str(setup.table) and "//127.0.0.1" not in str(setup.table), setup.table
    sid = real.spawn("Write it.", name, sandbox="bwrap")
    d = real.wait(sid)
    assert (d["status"], d["last_message"]) == ("completed", "Proxied."), (d, real.stderr(sid))
    assert (real.work / "p.txt").read_text() == "through the proxy\n"
    assert len(srv.requests) >= 2
    assert "zwarm proxy: refused" not in real.stderr(sid)


class _Hello:
    """A TCP listener on loopback recording the first bytes of each connection, then closing
    it: where a TLS client's ClientHello (with the name it asked for, SNI) lands."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    conn.settimeout(10)
                    with contextlib.suppress(OSError):
                        self.got.append(conn.recv(16384))


@pytest.mark.parametrize("name", ["codex", "claude", "gemini"])
def test_a_sandboxed_cli_tunnels_https_through_the_proxy(real: RealWorld, name: str) -> None:
    """An ``https://`` endpoint (as every real API is) goes through the proxy as a CONNECT
    tunnel: the TLS ClientHello naming the host arrives at the address the proxy resolved.
    Offline there is no certificate to trust, so the handshake then fails."""
    hello = _Hello()
    real.use(name, [Reply([text("never")])])
    setup = real.agents[name]
    setup.table = _by_name(setup.table)
    url = f"https://{FAKE_HOST}:{hello.port}"

    def https(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: https(v) for k, v in value.items()}
        if isinstance(value, str) and value.startswith(f"http://{FAKE_HOST}:"):
            rest = value.split(":", 2)[2]
            return url + rest[rest.index("/") :] if "/" in rest else url
        return value

    setup.table = https(setup.table)
    assert url in str(setup.table), setup.table
    real.tables["sandbox"] = {"resolve": {FAKE_HOST: "127.0.0.1"}}
    real.write_config()
    sid = real.spawn("Hi.", name, sandbox="bwrap")
    wait_until(lambda: hello.got, message="a connection through the proxy")
    assert hello.got[0].startswith(b"\x16\x03"), hello.got  # a TLS handshake
    assert FAKE_HOST.encode() in hello.got[0], hello.got  # SNI: the name asked for
    assert "zwarm proxy: refused" not in real.stderr(sid)
    # codex waits for the network to come back forever: the test ends the turn
    real.api().kill([sid])
    hello.sock.close()
