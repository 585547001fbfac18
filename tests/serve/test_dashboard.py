"""The dashboard of ``zwarm serve`` in a real headless browser (Debian's Chromium, driven by
Playwright): the token from the URL fragment, the board updating live, a running session's
steps appearing as the agent writes them, a follow-up, kill, remove and a new session, at
desktop and phone widths; the page loads nothing from anywhere but the server.

Screenshots of the board and a session view at both widths are saved as test artifacts in
``.artifacts/screens/`` (git-ignored); with ``ZWARM_UPDATE_SCREENS=1`` also into
``docs/screens/`` (the copies in the repository).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, slurm, wait_until
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(300)

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
ARTIFACTS = ROOT / ".artifacts" / "screens"


@pytest.fixture
def browser() -> Any:
    """A headless Chromium (skipped where there is none, unless under CI, where it must be)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright is not installed")
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            raise AssertionError(f"{CHROMIUM} is missing (.ci/run installs it)")
        pytest.skip("chromium is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _shot(page: Any, name: str, full: bool = False) -> None:
    """A screenshot from the top of the page, once no toast covers it."""
    page.wait_for_selector("#toast", state="hidden", timeout=15_000)
    page.evaluate("window.scrollTo(0, 0)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    if os.environ.get("ZWARM_UPDATE_SCREENS") == "1":
        shutil.copy(path, ROOT / "docs" / "screens" / path.name)


def _showcase(path: Path, rounds: int) -> Path:
    """A codex turn that does a bit of everything, slowly enough to watch (then more)."""
    failing = "F..\nFAILED tests/test_parser.py::test_unicode - KeyError\n1 failed, 2 passed\n"
    todo = [{"text": "split the module", "completed": True}]
    todo.append({"text": "run the tests", "completed": False})
    changes = [{"path": "src/lexer.py", "kind": "add"}, {"path": "src/parser.py", "kind": "update"}]
    found = {"content": [{"type": "text", "text": "PEP 3131: identifiers are NFKC"}]}
    search = {"type": "mcp_tool_call", "server": "docs", "tool": "search_docs", "result": found}
    search.update(arguments={"query": "unicode identifiers"}, status="completed")
    items: list[dict[str, Any]] = [
        {"type": "reasoning", "text": "The parser mixes tokenizing and tree building; split it."},
        {"type": "agent_message", "text": "I'll split parser.py into lexer.py and tree.py."},
        {"type": "todo_list", "items": todo},
        _command("pytest -q tests/test_parser.py", failing, 1),
        {"type": "file_change", "changes": changes, "status": "completed"},
        search,
        _command("pytest -q", "....... 7 passed in 0.11s\n", 0),
    ]
    lines = ['{"type":"thread.started","thread_id":"01a1ffe6-3595-7f80-954f-f6552aa38b0a"}']
    lines.append('{"type":"turn.started"}')
    for k in range(rounds):
        for i, item in enumerate(items if k == 0 else items[1:2]):
            body = dict(item, id=f"item_{k}_{i}")
            if k:
                body["text"] = f"still working: step {k}"
            lines.append(json.dumps({"type": "item.completed", "item": body}))
    lines.append('{"type":"turn.completed","usage":{"input_tokens":900,"output_tokens":60}}')
    path.write_text("\n".join(lines) + "\n")
    return path


def _command(command: str, output: str, code: int) -> dict[str, Any]:
    return {"type": "command_execution", "command": f"/bin/bash -lc '{command}'",
            "aggregated_output": output, "exit_code": code,
            "status": "completed" if code == 0 else "failed"}  # fmt: skip


def _world(zw: Any, serve: Any) -> tuple[Server, str]:
    """Three finished sessions and a server whose agents stream the showcase slowly."""
    zw.spawn("add a --verbose flag to cli.py and document it in the README", "--name",
             "verbose", env_extra=zw.replay("codex_toolcall"))  # fmt: skip
    zw.spawn("write tests for parser.py, covering the empty input and unicode", "--model",
             "sonnet", "--name", "tests", env_extra=zw.replay("claude_toolcall"))  # fmt: skip
    zw.spawn("fix the flaky test in test_io.py", env_extra=zw.replay("codex_error"))
    git = ["git", "-C", str(zw.cwd), "-c", "user.email=t@t", "-c", "user.name=t"]
    (zw.cwd / "parser.py").write_text("def parse(text):\n    return text.split()\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run([*git, *args], check=True)
    show = _showcase(zw.tmp / "showcase.jsonl", 200)
    edit = "printf 'def lex(text):\\n    return text.split()\\n' > lexer.py"
    env = {"FAKE_REPLAY": str(show), "FAKE_LINE_DELAY": "0.6", "FAKE_SHELL": edit}
    srv = serve(env_extra=env)
    body = {"task": "split parser.py into a lexer and a tree builder; keep the tests green",
            "name": "refactor"}  # fmt: skip
    sid = srv.post("/api/sessions", body).json()["id"]
    return srv, sid


def test_the_dashboard_in_a_real_browser(zw, serve, browser) -> None:
    srv, sid = _world(zw, serve)
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(90_000)  # a loaded 2-core machine: 30 s was seen to run out
    page = context.new_page()
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(_where(m)))

    page.goto(f"{srv.base}/#token={srv.token}")
    page.wait_for_selector(f"tr[data-id='{sid}'] .st-running")
    assert page.evaluate("location.hash") == "#/"  # the token left the address bar
    assert context.cookies() == []
    for name in ("verbose", "tests"):
        page.wait_for_selector(f"tr:has-text('{name}') .st-completed")
    page.wait_for_selector("tr .st-failed")
    step = f"document.querySelector(`tr[data-id='{sid}'] .c-step`)"
    page.wait_for_function(f"() => {step}.textContent.length > 0")
    _shot(page, "serve-board-desktop")

    # a running session: its steps appear as the agent writes them
    page.click(f"tr[data-id='{sid}']")
    page.wait_for_selector("#steps .step.k-command")
    before = page.locator("#steps .step").count()
    page.wait_for_function(f"() => document.querySelectorAll('#steps .step').length > {before}")
    kinds = ("reasoning", "message", "todo", "command", "file_change", "tool_call", "tool_result")
    for kind in kinds:
        page.wait_for_selector(f"#steps .k-{kind}")
    page.wait_for_selector("#steps .k-command .ok")
    failed_cmd = page.locator("#steps .k-command .bad").first.text_content()
    assert failed_cmd == " (exit 1)"
    assert page.locator("#steps .k-command .ok").first.text_content() == " (exit 0)"
    assert page.locator("#s-status").text_content().startswith("running")
    _shot(page, "serve-session-desktop")

    # a follow-up: queued behind the running turn
    page.fill("#inject-text", "then update the README's parser section")
    page.click("#inject-btn")
    page.wait_for_selector("#toast:has-text('turn 2 queued')")
    queued = srv.get(f"/api/sessions/{sid}").json()["queued"]
    assert queued == ["then update the README's parser section"]
    page.wait_for_selector("#s-facts:has-text('+1 queued')")

    # its diff (the running turn's end taken live) and its turns
    page.click("#tabs [data-tab=diff]")
    page.wait_for_selector("#diff .add:has-text('+def lex(text):')")
    assert "1 file changed" in page.text_content("#diff")
    page.click("#tabs [data-tab=turns]")
    page.wait_for_selector("#turns tr:has-text('split parser.py') .st-running")
    page.click("#tabs [data-tab=steps]")

    # phone width, while it runs
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(300)
    _shot(page, "serve-session-phone")
    page.click(".back")
    page.wait_for_selector(f"tr[data-id='{sid}']")
    assert page.locator("th").first.is_hidden()  # cards, not a table, on a phone
    _shot(page, "serve-board-phone")
    page.set_viewport_size(DESKTOP)

    # kill, after confirming
    page.click(f"tr[data-id='{sid}']")
    page.wait_for_selector("#kill-btn:visible")
    page.click("#kill-btn")
    page.wait_for_selector("#confirm-dialog[open]")
    assert "Kill refactor?" in page.text_content("#confirm-text")
    page.click("#confirm-ok")
    page.wait_for_selector("#s-status .st-killed")
    assert zw.json("show", sid)["status"] == "killed"
    assert zw.json("show", sid)["queued"] == []  # dropped with the kill
    page.wait_for_selector("#kill-btn", state="hidden")

    # remove, after confirming (cancel first: nothing happens)
    page.click("#rm-btn")
    page.click("#confirm-cancel")
    assert srv.get(f"/api/sessions/{sid}").status == 200
    page.click("#rm-btn")
    page.click("#confirm-ok")
    page.wait_for_selector("#board:visible")
    page.wait_for_selector(f"tr[data-id='{sid}']", state="detached")
    assert srv.get(f"/api/sessions/{sid}").status == 404

    # a new session from the page
    page.click("#new-btn")
    page.fill("#n-task", "add type hints to lexer.py")
    page.fill("#n-name", "hints")
    page.click("#new-submit")
    page.wait_for_selector("#session:visible #steps .step")
    made = [r for r in zw.json("ls") if r["name"] == "hints"]
    assert len(made) == 1 and made[0]["source"] == "serve"
    assert page.evaluate("location.hash") == f"#/s/{made[0]['id']}"

    # a request for the session just removed may still be in flight when it goes: its 404
    # is the honest answer (the page then shows the board), not a page error
    gone = f"404 (Not Found) @ {srv.base}/api/sessions/{sid}"
    assert [
        p for p in problems if not p.startswith("Failed to load resource") or gone not in p
    ] == []
    outside = [u for u in requests if not u.startswith(srv.base + "/")]
    assert outside == [], outside  # nothing loaded from anywhere else
    context.close()


def _where(m: Any) -> str:
    """A console message with the URL it is about (Chrome's text for a failed load has none)."""
    return f"{m.text} @ {(m.location or {}).get('url', '')}"


def test_the_page_without_its_token(zw, server: Server, browser) -> None:
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{server.base}/")
    page.wait_for_selector("#notoken:visible")
    assert page.locator("#board").is_hidden()
    page.close()
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{server.base}/#token=not-the-token-{'x' * 40}")
    page.wait_for_selector("#notoken:visible")
    assert "refused the token" in page.text_content("#notoken-why")
    page.close()


def test_session_text_is_never_markup(zw, serve, browser) -> None:
    """What an agent writes is shown as text: a message holding HTML runs nothing."""
    evil = zw.tmp / "evil.jsonl"
    msg = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
    item = {"id": "i", "type": "agent_message", "text": msg}
    evil.write_text(
        '{"type":"turn.started"}\n'
        + json.dumps({"type": "item.completed", "item": item})
        + '\n{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}\n'
    )
    srv = serve(env_extra={"FAKE_REPLAY": str(evil)})
    sid = srv.post("/api/sessions", {"task": msg}).json()["id"]
    wait_until(lambda: zw.meta(sid)["status"] == "completed")
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{srv.base}/#token={srv.token}")
    page.wait_for_selector(f"tr[data-id='{sid}']")
    page.click(f"tr[data-id='{sid}']")
    page.wait_for_selector("#steps .k-message")
    assert msg in page.text_content("#steps .k-message")
    assert page.locator("#steps img, #s-task img, #sessions img").count() == 0
    assert page.title() != "pwned"
    page.close()


def test_a_best_of_set_shows_its_evidence_table(zw, serve, browser) -> None:
    """The group view of a set: one row per attempt in ranked order, a mark per check; an
    attempt's row on the board links to it; what an agent names (a model) is text."""
    from tests.support.workspace import make_repo

    repo = make_repo(zw.cwd / "repo", zw.env)
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config("[checks]\nunsandboxed = true\n")
    env = {**zw.replay("codex_simple"), "FAKE_SHELL": "echo {MODEL} >> src/app.py"}
    srv = serve(env_extra=env)
    evil = "<img src=x onerror=alert(1)>"
    body = {"task": "edit", "cwd": str(repo.path), "best_of": 2, "models": ["m1", evil],
            "check": ["grep -q m1 src/app.py"]}  # fmt: skip
    set_id = srv.post("/api/sets", body).json()["set"]
    wait_until(
        lambda: not any(a["pending"] for a in srv.get(f"/api/sets/{set_id}").json()["attempts"])
    )
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{srv.base}/#token={srv.token}")
    page.wait_for_selector(f".setlink:has-text('{set_id} #2')")
    page.click(f".setlink:has-text('{set_id} #1')")
    page.wait_for_selector("#g-table td.check")
    rows = page.locator("#g-table tbody tr")
    assert rows.count() == 2
    assert "✓" in rows.nth(0).text_content() and "m1" in rows.nth(0).text_content()
    assert "✗" in rows.nth(1).text_content() and evil in rows.nth(1).text_content()
    assert page.locator("#bestof img").count() == 0
    assert "checks unsandboxed" in page.text_content("#g-facts")
    rows.nth(0).click()
    page.wait_for_selector(f"#s-facts:has-text('{set_id} attempt')")
    page.close()


def test_costs_read_as_the_cli_shows_them(zw, server: Server, browser) -> None:
    """A session with an unknown part of its cost (a turn cut off after the model answered)
    and one whose cost is unknown: the board and the session view say what ``ls`` says."""
    lines = zw.sample_bytes("codex_toolcall").decode().splitlines()
    cut = zw.tmp / "cut_off.jsonl"
    cut.write_text("\n".join(ln for ln in lines if '"turn.completed"' not in ln) + "\n")
    partial = zw.spawn("hi", "--model", "gpt-5", env_extra=zw.replay("codex_simple"))
    zw.wait(partial)
    zw.run("inject", partial, "more", env_extra={"FAKE_REPLAY": str(cut)}, check=True)
    unknown = zw.spawn("hi", "--model", "no-such-model", env_extra=zw.replay("codex_simple"))
    zw.wait(partial, unknown)
    cli = {r[:8]: r.split() for r in zw.run("ls", check=True).stdout.splitlines()[1:]}
    assert "≥" in cli[partial[:8]] and "?" in cli[unknown[:8]]
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{server.base}/#token={server.token}")
    for sid, shown in ((partial, "≥ ~$0.0002"), (unknown, "?")):
        cell = page.locator(f"tr[data-id='{sid}'] .c-cost")
        cell.wait_for()
        assert cell.text_content() == shown
    page.click(f"tr[data-id='{partial}']")
    page.wait_for_selector("#s-facts:has-text('≥ ~$0.0002')")
    page.close()


# what the board showed, recorded by the page itself at every change of the DOM from its start
_WATCH_BOARD = """
window.__seen = [];
new MutationObserver(() => {
  const board = document.getElementById("board");
  const empty = document.getElementById("empty");
  if (!board || board.hidden || !empty) return;
  const state = {
    empty: !empty.hidden,
    rows: document.querySelectorAll("#sessions tbody tr").length,
  };
  const last = window.__seen[window.__seen.length - 1];
  if (!last || last.empty !== state.empty || last.rows !== state.rows) window.__seen.push(state);
}).observe(document, { subtree: true, childList: true, attributes: true });
"""

_TWO_FRAMES = "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"


def test_the_board_says_loading_until_it_knows(zw, serve, browser) -> None:
    """Until the first answer of the session feed the board says it is loading, never "No
    sessions yet": that is said only when the state dir holds none (the feed is held back
    here, in the browser, until the test has looked)."""
    srv = serve()

    def open_held() -> tuple[Any, list[Any]]:
        page = browser.new_page(viewport=DESKTOP)
        page.set_default_timeout(90_000)
        held: list[Any] = []
        page.route("**/api/events*", lambda route: held.append(route))  # held until told
        page.add_init_script(_WATCH_BOARD)
        page.goto(f"{srv.base}/#token={srv.token}")
        wait_until(lambda: held or page.wait_for_timeout(50), message="the feed's request")
        page.wait_for_selector("#board:visible")
        page.evaluate(_TWO_FRAMES)  # the board is drawn (without its rows)
        assert page.locator("#empty").is_hidden()
        assert page.locator("#loading").is_visible()
        return page, held

    page, held = open_held()  # no session at all
    held[0].continue_()
    page.wait_for_selector("#empty:visible")
    assert page.locator("#loading").is_hidden()
    page.close()

    ids = {zw.spawn(f"task {i}", env_extra=zw.replay("codex_toolcall")) for i in range(3)}
    wait_until(lambda: all(zw.meta(s)["status"] == "completed" for s in ids))
    page, held = open_held()  # the page draws its board while the feed is held (__seen)
    held[0].continue_()
    for sid in ids:
        page.wait_for_selector(f"tr[data-id='{sid}']")
    assert page.locator("#loading").is_hidden() and page.locator("#empty").is_hidden()
    seen = page.evaluate("window.__seen")
    assert seen and not any(s["empty"] for s in seen), seen
    assert seen[-1]["rows"] == 3
    page.close()


def test_steps_read_as_the_cli_shows_them(zw, server: Server, browser) -> None:
    """A codex command reads as the command inside its shell wrapper, and one that never
    finished in a turn that ended says so, where it started (as ``zwarm trajectory``)."""
    cmd = {"id": "c1", "type": "command_execution", "status": "in_progress",
           "command": "/bin/bash -lc 'sleep 100 && echo \"a b\"'", "aggregated_output": "",
           "exit_code": None}  # fmt: skip
    lines = [
        {"type": "turn.started"},
        {"type": "item.started", "item": cmd},
        {"type": "item.completed", "item": {"id": "m", "type": "agent_message", "text": "Done."}},
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}},
    ]
    path = zw.tmp / "unfinished.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sid = zw.spawn("hi", env_extra={"FAKE_REPLAY": str(path)})
    zw.wait(sid)
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{server.base}/#token={server.token}")
    page.click(f"tr[data-id='{sid}']")
    page.wait_for_selector("#steps .k-message")
    first = page.locator("#steps .step").first
    assert first.locator(".cmd").text_content() == '$ sleep 100 && echo "a b"'
    assert first.locator(".bad").text_content() == " (did not finish)"
    page.close()


def test_a_pending_slurm_job_reads_as_the_cli_shows_it(sl, serve, browser) -> None:
    """Regression: the board and the session view showed ``running`` for a session whose
    Slurm job waits in the cluster's queue, where ``zwarm ls``/``show`` say ``queued (slurm:
    BeginTime)`` (the row's ``shown_status``); the live board's rows did not even carry it.
    A real job, held by Slurm for an hour (``--begin``)."""
    slurm.sl_config(sl, extra_args=["--begin=now+3600"])
    srv = serve()
    sid = sl.spawn("never starts", env_extra=sl.replay("codex_simple"))
    with sl.api().store.transaction(sid) as s:  # waiting long past the local start grace
        s.turns[0].started_at = "2000-01-01T00:00:00+00:00"
    want = "queued (slurm: BeginTime)"
    wait_until(lambda: want in sl.run("ls").stdout, message="ls says queued")
    page = browser.new_page(viewport=DESKTOP)
    page.set_default_timeout(90_000)
    page.goto(f"{srv.base}/#token={srv.token}")
    shown = page.wait_for_selector(f"tr[data-id='{sid}'] .c-status .st-queued")
    assert shown is not None and shown.text_content() == want
    page.click(f"tr[data-id='{sid}']")
    page.wait_for_selector(f"#s-status .st-queued:has-text('{want}')")
    page.click("#tabs [data-tab=turns]")
    page.wait_for_selector(f"#turns tr .st-queued:has-text('{want}')")
    assert "running" not in page.text_content("#s-status")
    page.close()
    assert sl.run("kill", sid).returncode == 0


def test_the_sandbox_and_its_limits_read_as_the_cli_shows_them(zw, serve, browser) -> None:
    """A session whose turns run in zwarm's sandbox under limits: the board marks its agent
    ``bwrap`` (``ls --json``'s ``sandbox``), the session view says the sandbox and how the
    latest turn's limits held, each turn its own, as ``zwarm show`` does."""
    if not os.path.exists("/usr/bin/bwrap"):
        pytest.skip("bubblewrap is not installed")
    from tests.support import SAMPLES

    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(f'[sandbox]\nread_only = ["{SAMPLES}"]\nmemory = "256M"\npids = 128\n')
    srv = serve()
    boxed = zw.spawn("--sandbox", "bwrap", "boxed", env_extra=zw.replay("codex_simple"))
    plain = zw.spawn("--sandbox", "off", "plain", env_extra=zw.replay("codex_simple"))
    zw.wait(boxed, plain)
    limits = zw.json("show", boxed)["turns_detail"][0]["limits"]
    assert limits.startswith("memory 256M via ") and "pids 128 via " in limits, limits
    assert {r["id"]: r["sandbox"] for r in zw.json("ls")} == {boxed: "bwrap", plain: "off"}
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{srv.base}/#token={srv.token}")
    flag = page.wait_for_selector(f"tr[data-id='{boxed}'] .c-agent .sbx-flag")
    assert flag is not None and flag.text_content() == "bwrap"
    assert page.locator(f"tr[data-id='{plain}'] .sbx-flag").count() == 0
    page.click(f"tr[data-id='{boxed}']")
    page.wait_for_selector(f"#s-facts:has-text('bwrap · limits: {limits}')")
    page.click("#tabs [data-tab=turns]")
    page.wait_for_selector(f"#turns .dim:has-text('limits: {limits}')")
    page.goto(f"{srv.base}/#token={srv.token}")
    page.click(f"tr[data-id='{plain}']")
    page.wait_for_selector(f"#s-title:has-text('{plain}')")
    page.wait_for_selector("#s-facts dt:has-text('cwd')")
    assert "sandbox" not in page.locator("#s-facts dt").all_text_contents()
    page.close()


def test_the_merge_queue_on_the_dashboard(zw, serve, browser) -> None:
    """A worktree session's page queues it for merge (the trusted [merge] check runs); the
    board shows the queue: merged, ejected and why; Run now processes it."""
    from tests.support.workspace import agent, make_repo

    repo = make_repo(zw.cwd / "repo", zw.env)
    ids = {}
    for name, shell in (("good", "echo ok > ok.txt"), ("bad", "echo no > no.txt; touch BROKEN")):
        ids[name] = zw.spawn("t", "-C", str(repo.path), "--worktree", "--name", name,
                             env_extra=agent(shell))  # fmt: skip
    zw.wait(*ids.values())
    zw.write_config('[checks]\nunsandboxed = true\n\n[merge]\ncheck = ["test ! -e BROKEN"]\n')
    srv = serve()
    page = browser.new_context(viewport=DESKTOP).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{srv.base}/#token={srv.token}")
    page.wait_for_selector(f"tr[data-id='{ids['good']}']")
    assert page.locator("#merges").is_hidden()  # no queue yet
    for name, says in (("good", "good: merged"), ("bad", "bad: ejected: check failed")):
        page.click(f"tr[data-id='{ids[name]}']")
        page.wait_for_selector("#queue-btn:visible")
        page.click("#queue-btn")
        page.wait_for_selector(f"#toast:has-text('{says}')")
        page.click(".back")
    page.wait_for_selector("#merges li.mq-merged:has-text('zwarm/good')")
    bad = page.locator("#merges li.mq-ejected").text_content() or ""
    assert "zwarm/bad" in bad and "check failed: `test ! -e BROKEN` exited with 1" in bad
    page.click("#merges-run")
    page.wait_for_selector("#merges-run:enabled")
    assert repo.git("show", "main:ok.txt") == "ok\n"
    assert problems == []


def test_the_ledger_and_the_accounts_on_the_board(zw, serve, browser) -> None:
    """The board shows zwarm usage's totals (by account, or as chosen) and each account's
    state as zwarm accounts has them (issue 38: the dashboard shows the ledger)."""
    zw.state_dir.mkdir(parents=True, exist_ok=True)
    zw.write_config('[accounts.codex.main]\nenv = { ACCT = "main" }\nmax_running = 3\n')
    sids = [zw.spawn(f"t{i}", env_extra=zw.replay("codex_simple")) for i in range(2)]
    zw.wait(*sids)
    total = zw.json("usage")["total"]
    assert total["turns"] == 2 and total["total_tokens"] > 0
    srv = serve()
    page = browser.new_context(viewport=DESKTOP).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{srv.base}/#token={srv.token}")
    page.wait_for_selector("#usage:visible")
    acct = page.locator("#accounts-list tr.acct-ready").text_content() or ""
    assert "codex.main" in acct and "0/3" in acct, acct
    row = page.locator("#usage-list tr.total").text_content() or ""
    assert f"{total['total_tokens']}" in row and "total" in row, row
    page.select_option("#usage-by", "agent")
    page.wait_for_selector("#usage-list th:has-text('agent')")
    assert "codex" in (page.locator("#usage-list").text_content() or "")
    assert problems == []
