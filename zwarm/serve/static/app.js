// zwarm's dashboard: the session board and a session's live view, on zwarm serve's HTTP API.
// Plain JavaScript, no build step, nothing loaded from elsewhere. Rules kept here:
// - the access token comes from the URL fragment (#token=...), is kept in sessionStorage
//   (never a cookie) and sent only as an Authorization header to this server;
// - text from sessions (tasks, messages, commands, outputs) is only ever set as textContent:
//   nothing an agent writes becomes markup;
// - streams are server-sent events read with fetch (EventSource cannot send a header), resumed
//   after a drop with Last-Event-ID, so no step is lost or shown twice.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  // mirrors zwarm/model/status.py: ACTIVE, and RUNS (running, stalled) below
  const ACTIVE = new Set(["running", "stalled", "queued", "parked"]);
  const MAX_ROWS = 500; // rows the board shows (newest first)
  const MAX_STEPS = 3000; // steps kept on the page; older ones are dropped from view
  const SHORT_LINES = 12;
  const SHORT_CHARS = 1200;
  const state = {
    token: null,
    info: null,
    rows: new Map(),
    loaded: false, // the board's first snapshot came: until then it says "loading", not "none"
    board: null, // the /api/events stream
    view: null, // {id, stream, detail, steps}
    drawQueued: false,
  };

  // ------------------------------------------------------------------ small helpers
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  function oneLine(text, n) {
    const s = String(text ?? "").replace(/\s+/g, " ").trim();
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }
  function fmtTokens(n) {
    if (n === null || n === undefined) return "-";
    if (n < 1000) return String(n);
    if (n < 1e6) return (n / 1e3).toFixed(n < 1e4 ? 1 : 0) + "k";
    return (n / 1e6).toFixed(n < 1e7 ? 1 : 0) + "M";
  }
  // as the CLI's _no_exit (zwarm/cli/render.py): what a command without an exit code says
  function noExit(status) {
    if (status === "in_progress") return "running";
    if (status === "unfinished") return "did not finish";
    return status || "no exit code";
  }
  // as the CLI's command_text: the command inside a shell wrapper (bash -lc 'X' -> X)
  function commandText(command) {
    const text = String(command || "");
    const head = text.split(" ");
    if (head.length < 3 || !SHELLS.has(head[0].split("/").pop())) return text;
    if (!/^-[A-Za-z]*c[A-Za-z]*$/.test(head[1])) return text;
    const words = shellWords(text);
    return words && words.length === 3 && words[2].trim() ? words[2] : text;
  }
  const SHELLS = new Set(["sh", "bash", "zsh", "dash", "ksh"]);
  // POSIX shell words (as Python's shlex.split): null when a quote is left open
  function shellWords(text) {
    const words = [];
    let word = null;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (c === " " || c === "\t" || c === "\r" || c === "\n") {
        if (word !== null) words.push(word);
        word = null;
      } else if (c === "'") {
        const end = text.indexOf("'", i + 1);
        if (end < 0) return null;
        word = (word || "") + text.slice(i + 1, end);
        i = end;
      } else if (c === '"') {
        word = word || "";
        for (i++; i < text.length && text[i] !== '"'; i++) {
          if (text[i] === "\\" && i + 1 < text.length && '\\"'.includes(text[i + 1])) i++;
          word += text[i];
        }
        if (i >= text.length) return null;
      } else if (c === "\\") {
        if (i + 1 >= text.length) return null;
        word = (word || "") + text[++i];
      } else {
        word = (word || "") + c;
      }
    }
    if (word !== null) words.push(word);
    return words;
  }
  // as the CLI's fmt_cost (zwarm/cli/render.py): "?" when nothing is known, "≥ " before the
  // known part of a cost with unknown parts, "~" when estimated from token prices
  function fmtCost(c, source, complete) {
    if (c === null || c === undefined) return "?";
    const v = c < 1 ? c.toFixed(4) : c.toFixed(2);
    return (complete === false ? "≥ " : "") + (source === "estimated" ? "~$" : "$") + v;
  }
  function fmtAge(iso) {
    if (!iso) return "-";
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return Math.floor(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }
  function fmtWhen(iso) {
    return iso ? new Date(iso).toLocaleString() : "-";
  }
  // What a running row's launcher says instead of "running" (its shown_status: "queued
  // (slurm: Resources)"), as the CLI shows it (render.launcher_status); null otherwise.
  function launcherStatus(r) {
    if ((r.status !== "running" && r.status !== "stalled") || !r.shown_status) return null;
    return oneLine(r.shown_status, 60);
  }
  function statusText(r) {
    const shown = launcherStatus(r);
    if (shown !== null) return shown;
    let s = r.status || "-";
    if (s === "failed" && r.reason) s += " (" + r.reason.replace(/_/g, " ") + ")";
    return s;
  }
  function statusEl(r) {
    const shown = launcherStatus(r);
    const word = shown !== null ? shown.split(" ", 1)[0] : r.status || "none";
    const span = el("span", "status st-" + word, statusText(r));
    if (r.dangerous) span.append(el("span", "danger-flag", "!danger"));
    return span;
  }
  // zwarm's own sandbox of its turns ("bwrap"), as `zwarm show` says it; "off": none
  function sandboxed(r) {
    return Boolean(r.sandbox) && r.sandbox !== "off";
  }
  // the sandbox and how the latest turn's limits held (each turn says its own)
  function sandboxText(d) {
    const turns = d.turns_detail || [];
    const last = turns.filter((t) => t.limits).pop();
    return d.sandbox + (last ? " · limits: " + oneLine(last.limits, 200) : "");
  }
  function tokensOf(r) {
    if (r.live_tokens !== null && r.live_tokens !== undefined) return r.live_tokens;
    return r.usage ? r.usage.total_tokens : null;
  }
  let toastTimer = null;
  function toast(text, bad) {
    const t = $("toast");
    t.textContent = text;
    t.className = "toast" + (bad ? " bad" : "");
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (t.hidden = true), bad ? 7000 : 3500);
  }

  // ------------------------------------------------------------------ the API
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }
  async function api(method, path, body) {
    const opts = { method, headers: { Authorization: "Bearer " + state.token }, cache: "no-store" };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    let data = null;
    try {
      data = await r.json();
    } catch (e) {
      data = null;
    }
    if (r.status === 401) noToken("The server refused the token: open the address zwarm serve printed.");
    if (!r.ok) throw new ApiError(r.status, (data && data.error) || r.status + " " + r.statusText);
    return data;
  }

  // Server-sent events over fetch, resumed with Last-Event-ID after a drop.
  class Stream {
    constructor(path, onEvent, onState) {
      this.path = path;
      this.onEvent = onEvent;
      this.onState = onState || (() => {});
      this.lastId = null;
      this.stopped = false;
      this.ctrl = null;
      this.run();
    }
    async run() {
      let delay = 500;
      while (!this.stopped) {
        this.ctrl = new AbortController();
        try {
          const headers = { Authorization: "Bearer " + state.token, Accept: "text/event-stream" };
          if (this.lastId) headers["Last-Event-ID"] = this.lastId;
          const r = await fetch(this.path, { headers, signal: this.ctrl.signal, cache: "no-store" });
          if (r.status === 401) {
            noToken("The server refused the token: open the address zwarm serve printed.");
            return;
          }
          if (r.status === 404 || r.status === 422) {
            this.onState("gone");
            return;
          }
          if (!r.ok) throw new Error(r.status);
          this.onState("live");
          delay = 500;
          await this.read(r.body.getReader());
        } catch (e) {
          if (this.stopped) return;
        }
        if (this.stopped) return;
        this.onState("down");
        await sleep(delay);
        delay = Math.min(delay * 2, 8000);
      }
    }
    async read(reader) {
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          this.dispatch(block);
          if (this.stopped) return;
        }
      }
    }
    dispatch(block) {
      let event = "message";
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line[0] === ":") continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        let value = c < 0 ? "" : line.slice(c + 1);
        if (value[0] === " ") value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
        else if (field === "id") id = value;
      }
      if (id !== null) this.lastId = id;
      if (!data.length) return;
      let obj;
      try {
        obj = JSON.parse(data.join("\n"));
      } catch (e) {
        return;
      }
      this.onEvent(event, obj);
    }
    stop() {
      this.stopped = true;
      if (this.ctrl) this.ctrl.abort();
    }
  }

  // ------------------------------------------------------------------ token and routes
  function readToken() {
    const hash = location.hash.replace(/^#/, "");
    if (hash.startsWith("token=")) {
      const token = new URLSearchParams(hash).get("token");
      if (token) sessionStorage.setItem("zwarm-token", token);
      history.replaceState(null, "", location.pathname + location.search + "#/");
    }
    return sessionStorage.getItem("zwarm-token");
  }
  function noToken(why) {
    if (why) $("notoken-why").textContent = why;
    for (const id of ["board", "session", "new-btn"]) $(id).hidden = true;
    $("notoken").hidden = false;
    if (state.board) state.board.stop();
    if (state.view && state.view.stream) state.view.stream.stop();
    setConn("down", "no token");
  }
  function setConn(cls, text) {
    const c = $("conn");
    c.className = "conn " + cls;
    c.textContent = text;
  }
  function route() {
    const m = location.hash.match(/^#\/s\/([0-9a-f-]{36})$/);
    const g = location.hash.match(/^#\/set\/(set-[0-9a-f]{8})$/);
    if (m) showSession(m[1]);
    else if (g) showSet(g[1]);
    else showBoard();
  }

  // ------------------------------------------------------------------ the board
  function startBoard() {
    state.board = new Stream(
      "/api/events",
      (event, data) => {
        if (event === "snapshot") {
          state.rows = new Map(data.sessions.map((r) => [r.id, r]));
          state.loaded = true;
        } else if (event === "session") {
          state.rows.set(data.id, data);
        } else if (event === "removed") {
          state.rows.delete(data.id);
        }
        queueDraw();
      },
      (s) => setConn(s === "live" ? "live" : "down", s === "live" ? "live" : "reconnecting"),
    );
    setInterval(() => {
      queueDraw(); // ages
      if (!$("board").hidden) {
        loadMerges();
        loadUsage();
      }
    }, 10000);
  }
  function queueDraw() {
    if (state.drawQueued) return;
    state.drawQueued = true;
    requestAnimationFrame(() => {
      state.drawQueued = false;
      drawBoard();
      if (state.view) drawHeader();
    });
  }
  function drawBoard() {
    const rows = [...state.rows.values()].sort((a, b) =>
      (b.created_at || "").localeCompare(a.created_at || ""),
    );
    const running = rows.filter((r) => ACTIVE.has(r.status)).length;
    $("counts").textContent = rows.length
      ? `${rows.length} session${rows.length === 1 ? "" : "s"}, ${running} active`
      : "";
    const body = el("tbody");
    for (const r of rows.slice(0, MAX_ROWS)) body.append(boardRow(r));
    $("sessions").tBodies[0].replaceWith(body);
    $("loading").hidden = state.loaded;
    $("empty").hidden = !state.loaded || rows.length > 0;
    $("more").hidden = rows.length <= MAX_ROWS;
    $("more").textContent = `${rows.length - MAX_ROWS} older sessions not shown`;
  }
  function boardRow(r) {
    const tr = el("tr");
    tr.dataset.id = r.id;
    tr.addEventListener("click", () => (location.hash = "#/s/" + r.id));
    const st = el("td", "c-status");
    st.append(statusEl(r));
    const who = el("td", "who");
    who.append(el("b", "", r.name || r.id.slice(0, 8)));
    if (r.name) who.append(el("span", "id", r.id.slice(0, 8) + " "));
    if (r.set) who.append(setLink(r.set, r.attempt));
    who.append(el("span", "brief", oneLine(r.damaged ? r.error : r.task, 140)));
    const step = r.activity || (r.status === "failed" ? r.error : r.last_message) || "";
    const agent = el("td", "c-agent", r.adapter || "-");
    if (sandboxed(r)) agent.append(el("span", "sbx-flag", r.sandbox));
    if (r.host) agent.append(el("span", "host-flag", "on " + oneLine(r.host, 24)));  // as ls's HOST
    tr.append(
      st,
      who,
      agent,
      el("td", "c-model", oneLine(r.model || "default", 28)),
      el("td", "num c-tokens", fmtTokens(tokensOf(r))),
      el("td", "num c-cost", fmtCost(r.cost_usd, r.cost_source, r.cost_complete)),
      el("td", "c-age", fmtAge(r.created_at)),
      el("td", "c-step", oneLine(step, 160)),
    );
    return tr;
  }
  function setLink(id, attempt) {
    const a = el("a", "setlink", `${id} #${attempt}`);
    a.href = "#/set/" + id;
    a.addEventListener("click", (e) => e.stopPropagation());
    return a;
  }

  // ------------------------------------------------------------------ a best-of set
  async function showSet(id) {
    stopView();
    $("board").hidden = true;
    $("session").hidden = true;
    $("bestof").hidden = false;
    $("g-title").textContent = id;
    document.title = id + " · zwarm";
    let v;
    try {
      v = await api("GET", "/api/sets/" + id);
    } catch (e) {
      toast(e.message, true);
      location.hash = "#/";
      return;
    }
    $("g-task").textContent = v.task;
    const where = v.checks_sandboxed ? "sandboxed" : "unsandboxed (opted in)";
    $("g-facts").textContent =
      `base ${v.base.slice(0, 12)} · checks ${where} · ranked by ${v.rank.join(", ")}` +
      (v.picked ? ` · picked attempt ${v.picked}` : "");
    const head = el("tr");
    for (const h of ["#", "Attempt", "Agent", "Model", ...v.checks.map((c, i) => `check ${i + 1}`),
      "Files", "Lines", "Cost", "Time", "Status / flags"]) head.append(el("th", "", h));
    const body = el("tbody");
    for (const a of v.attempts) {
      const tr = el("tr", a.passed ? "passed" : "");
      tr.addEventListener("click", () => (location.hash = "#/s/" + a.session));
      tr.append(el("td", "num", String(a.place)), el("td", "num", String(a.attempt)),
        el("td", "", a.adapter), el("td", "", oneLine(a.model || "default", 28)));
      v.checks.forEach((cmd, i) => {
        const c = a.checks[i];
        const mark = a.pending ? "…" : !c ? "-" : c.timed_out ? "⧗" : c.passed ? "✓" : "✗";
        const td = el("td", "check " + (c && c.passed ? "ok" : "bad"), mark);
        td.title = c ? `${cmd}\nexit ${c.exit_code}, ${c.duration_s}s\n${c.output_tail}` : cmd;
        tr.append(td);
      });
      tr.append(el("td", "num", String(a.files)), el("td", "num", String(a.lines)),
        el("td", "num", fmtCost(a.cost_usd, a.cost_source)),
        el("td", "num", a.wall_s.toFixed(1) + "s"),
        el("td", "", [a.status, ...a.flags].join("; ")));
      body.append(tr);
    }
    const table = el("table", "sessions");
    table.id = "g-table";
    const thead = el("thead");
    thead.append(head);
    table.append(thead, body);
    $("g-table").replaceWith(table);
  }

  function showBoard() {
    stopView();
    $("bestof").hidden = true;
    $("session").hidden = true;
    $("board").hidden = false;
    document.title = "zwarm";
    queueDraw();
    loadMerges();
    loadUsage();
  }

  // ------------------------------------------------------------------ the merge queue
  async function loadMerges() {
    let queues;
    try {
      queues = await api("GET", "/api/merges");
    } catch (e) {
      return; // the board still works; the next load tries again
    }
    const wrap = el("div");
    for (const q of queues) {
      wrap.append(el("h3", "", q.target + (q.paused ? " (paused)" : "")));
      if (q.blocked) wrap.append(el("p", "error", "blocked: " + oneLine(q.blocked, 200)));
      const ul = el("ul");
      for (const e of q.entries.slice(0, 50)) {
        const li = el("li", "mq-" + e.state);
        li.dataset.session = e.session_id;
        li.append(el("span", "status", e.state), el("b", "", " " + e.branch));
        if (e.why) li.append(el("span", "dim", " " + oneLine(e.why, 160)));
        ul.append(li);
      }
      wrap.append(ul);
    }
    $("merges-list").replaceChildren(wrap);
    $("merges").hidden = queues.length === 0;
  }
  // ------------------------------------------------------------------ usage and accounts
  // as zwarm usage and zwarm accounts print them: the ledger's totals (a cost with unpriced
  // turns is "≥ " its known part, "~" estimated) and each account's state
  async function loadUsage() {
    let usage, accounts;
    try {
      const by = $("usage-by").value;
      [usage, accounts] = await Promise.all([
        api("GET", "/api/usage?by=" + encodeURIComponent(by)),
        api("GET", "/api/accounts"),
      ]);
    } catch (e) {
      return; // the board still works; the next load tries again
    }
    const acc = el("table", "usage-accounts");
    if (accounts.length) {
      const head = el("tr");
      for (const h of ["account", "state", "running", "today", "last limit"]) head.append(el("th", "", h));
      acc.append(head);
    }
    for (const a of accounts.slice(0, 100)) {
      const tr = el("tr", "acct-" + a.state);
      let state = a.state;
      if (a.until) state += " until " + new Date(a.until).toLocaleTimeString();
      if (a.why) state += " (" + oneLine(a.why, 120) + ")";
      const budget = a.budget_daily_usd ? " of $" + a.budget_daily_usd.toFixed(2) : "";
      tr.append(
        el("td", "", a.agent + "." + a.name),
        el("td", "", state),
        el("td", "num", a.running + (a.max_running ? "/" + a.max_running : "")),
        el("td", "num", "$" + a.spent_today_usd.toFixed(4) + budget),
        el("td", "dim", a.last_limit ? oneLine(a.last_limit.reason + " " + (a.last_limit.at || ""), 80) : "-"),
      );
      acc.append(tr);
    }
    const tab = el("table", "usage-rows");
    const head = el("tr");
    for (const h of [usage.by, "turns", "tokens", "cost"]) head.append(el("th", "", h));
    tab.append(head);
    for (const r of [...usage.rows.slice(0, 200), usage.total]) {
      const cost = fmtCost(r.cost_usd, r.estimated_turns ? "estimated" : null, r.cost_complete);
      const unpriced = r.unpriced_turns ? " (" + r.unpriced_turns + " turns unpriced)" : "";
      const tr = el("tr", r === usage.total ? "total" : "");
      tr.append(
        el("td", "", r.key),
        el("td", "num", r.turns),
        el("td", "num", r.total_tokens),
        el("td", "num", cost + unpriced),
      );
      tab.append(tr);
    }
    $("accounts-list").replaceChildren(accounts.length ? acc : "");
    $("usage-list").replaceChildren(tab);
    $("usage").hidden = usage.rows.length === 0 && accounts.length === 0;
  }
  async function runMerges() {
    $("merges-run").disabled = true;
    try {
      await api("POST", "/api/merges/run");
    } catch (e) {
      toast(e.message, true);
    } finally {
      $("merges-run").disabled = false;
      loadMerges();
    }
  }
  async function queueMerge() {
    const view = state.view;
    if (!view) return;
    const name = view.detail.name || view.id.slice(0, 8);
    $("queue-btn").disabled = true;
    try {
      const r = await api("POST", "/api/merges", { sessions: [view.id] });
      const mine = ((r.run && r.run.done) || []).filter((d) => d.session_id === view.id);
      const how = mine.length ? mine[mine.length - 1] : null;
      toast(how ? `${name}: ${how.state}` + (how.why ? ": " + oneLine(how.why, 160) : "") : `${name} queued`, how && how.state !== "merged");
      refetch(view);
    } catch (e) {
      toast(e.message, true);
    } finally {
      $("queue-btn").disabled = false;
    }
  }

  // ------------------------------------------------------------------ one session
  function stopView() {
    if (state.view && state.view.stream) state.view.stream.stop();
    state.view = null;
  }
  async function showSession(id) {
    if (state.view && state.view.id === id) return;
    stopView();
    const view = { id, detail: null, stream: null, steps: 0, dropped: 0, refetch: null, turn: null };
    state.view = view;
    $("board").hidden = true;
    $("bestof").hidden = true;
    $("session").hidden = false;
    $("steps").replaceChildren();
    $("steps-cut").hidden = true;
    $("turns").replaceChildren();
    $("diff").replaceChildren();
    $("s-title").textContent = id.slice(0, 8);
    $("steps-state").textContent = "loading…";
    selectTab("steps");
    try {
      view.detail = await api("GET", "/api/sessions/" + id);
    } catch (e) {
      if (state.view !== view) return;
      toast(e.message, true);
      location.hash = "#/";
      return;
    }
    if (state.view !== view) return;
    drawHeader();
    drawTurns();
    view.stream = new Stream(
      `/api/sessions/${id}/stream`,
      (event, data) => onSessionEvent(view, event, data),
      (s) => {
        if (s === "gone" && state.view === view) {
          toast("session " + id.slice(0, 8) + " is gone", true);
          location.hash = "#/";
        }
      },
    );
  }
  function onSessionEvent(view, event, data) {
    if (state.view !== view) return;
    if (event === "step") {
      addStep(view, data);
    } else if (event === "turn") {
      if (data.phase === "started") {
        $("steps").append(el("div", "rule", "turn " + data.n));
        view.steps += 1;
      } else {
        const t = data.turn || {};
        const end = el("div", "rule", `turn ${data.n} ${t.status || ""}` + (t.duration_s ? ` · ${t.duration_s.toFixed(1)} s` : ""));
        $("steps").append(end);
      }
      refetch(view);
    } else if (event === "session") {
      if (view.detail) Object.assign(view.detail, data, { turns_detail: view.detail.turns_detail });
      drawHeader();
      refetch(view);
    } else if (event === "idle") {
      $("steps-state").textContent = "idle: send a follow-up to continue";
    } else if (event === "removed") {
      toast("session " + view.id.slice(0, 8) + " was removed");
      location.hash = "#/";
    } else if (event === "problem") {
      toast(data.message, true);
    }
    if (event === "step" || (event === "turn" && data.phase === "started")) {
      $("steps-state").textContent = ACTIVE.has((view.detail || {}).status) ? "live" : "";
    }
  }
  function refetch(view) {
    clearTimeout(view.refetch);
    view.refetch = setTimeout(async () => {
      try {
        const d = await api("GET", "/api/sessions/" + view.id);
        if (state.view !== view) return;
        view.detail = d;
        drawHeader();
        drawTurns();
        if (!$("tab-diff").hidden) loadDiff();
      } catch (e) {
        /* the stream says what happened */
      }
    }, 250);
  }
  function drawHeader() {
    const view = state.view;
    if (!view || !view.detail) return;
    const d = { ...view.detail, ...(state.rows.get(view.id) || {}) };
    d.turns_detail = view.detail.turns_detail;
    document.title = (d.name || d.id.slice(0, 8)) + " · zwarm";
    $("s-title").textContent = d.name ? `${d.name} (${d.id.slice(0, 8)})` : d.id;
    $("s-status").replaceChildren(statusEl(d));
    const facts = [
      ["agent", d.adapter],
      ["model", d.model || "default"],
      ["turns", d.turns + (d.queued && d.queued.length ? ` (+${d.queued.length} queued)` : "")],
      ["tokens", fmtTokens(tokensOf(d)) + (ACTIVE.has(d.status) ? " so far" : "")],
      ["cost", fmtCost(d.cost_usd, d.cost_source, d.cost_complete)],
      ["age", fmtAge(d.created_at)],
      ["cwd", d.cwd],
    ];
    if (sandboxed(d)) facts.push(["sandbox", sandboxText(d)]);
    if (d.branch) facts.push(["branch", d.branch]);
    if (d.set) facts.push(["best-of", `${d.set} attempt ${d.attempt}`]);
    if (d.account) facts.push(["account", d.account]);
    if (d.error) facts.push(["error", oneLine(d.error, 200)]);
    const dl = el("dl", "facts");
    dl.id = "s-facts";
    for (const [k, v] of facts) {
      const div = el("div");
      div.append(el("dt", "", k), el("dd", "", v ?? "-"));
      dl.append(div);
    }
    $("s-facts").replaceWith(dl);
    $("s-task").textContent = d.task || "";
    $("kill-btn").hidden = !ACTIVE.has(d.status);
    const worktree = d.workspace && d.workspace.mode === "worktree" && !d.workspace.removed;
    $("queue-btn").hidden = !worktree || ACTIVE.has(d.status);
  }
  function drawTurns() {
    const view = state.view;
    const turns = (view && view.detail && view.detail.turns_detail) || [];
    const table = el("table", "turns");
    const head = el("tr");
    for (const h of ["#", "status", "when", "took", "exit", "tokens", "cost", "prompt / outcome"]) {
      head.append(el("th", h === "when" ? "c-when" : h === "cost" ? "c-cost" : "", h));
    }
    table.append(head);
    for (const t of turns) {
      const tr = el("tr");
      const st = el("td");
      // the latest turn as `zwarm show` says it: its launcher's word if it has one
      const shown = t === turns[turns.length - 1] ? launcherStatus(view.detail) : null;
      const word = shown !== null ? shown.split(" ", 1)[0] : t.status;
      st.append(el("span", "status st-" + word, shown ?? t.status));
      const what = el("td", "prompt");
      what.append(el("div", "", oneLine(t.message, 400)));
      if (t.error) what.append(el("div", "err", oneLine(t.error, 400)));
      if (t.limits) what.append(el("div", "dim", "limits: " + oneLine(t.limits, 300)));
      if (t.final_message) what.append(el("div", "dim", "final: " + oneLine(t.final_message, 400)));
      tr.append(
        el("td", "", t.n),
        st,
        el("td", "c-when", fmtWhen(t.started_at)),
        el("td", "", t.duration_s !== undefined ? t.duration_s.toFixed(1) + " s" : "-"),
        el("td", "", t.exit_code ?? (t.signal ? "sig " + t.signal : "-")),
        el("td", "num", fmtTokens(t.usage ? t.usage.total_tokens : null)),
        el("td", "num c-cost", fmtCost(t.cost_usd, t.cost_usd ? view.detail.cost_source : null)),
        what,
      );
      table.append(tr);
    }
    $("turns").replaceChildren(table);
  }

  // ------------------------------------------------------------------ steps
  function addStep(view, s) {
    const box = $("steps");
    const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    box.append(stepEl(s));
    view.steps += 1;
    while (view.steps > MAX_STEPS) {
      box.firstChild.remove();
      view.steps -= 1;
      view.dropped += 1;
    }
    if (view.dropped) {
      $("steps-cut").hidden = false;
      $("steps-cut").textContent = `${view.dropped} earlier steps not shown (GET /api/sessions/${view.id}/trajectory has them all)`;
    }
    if (nearBottom) window.scrollTo(0, document.body.scrollHeight);
  }
  function stepEl(s) {
    const kind = s.kind || "unknown";
    const d = el("div", "step k-" + kind);
    d.dataset.id = s.id || "";
    const label = (text) => d.append(el("span", "lbl", text));
    if (kind === "message") {
      label("message");
      d.append(longText(s.text));
    } else if (kind === "reasoning") {
      label("reasoning");
      d.append(longText(s.text));
    } else if (kind === "command") {
      d.append(el("span", "cmd", "$ " + commandText(s.command)));
      const code = s.exit_code;
      const ended = code !== null && code !== undefined ? "exit " + code : noExit(s.status);
      d.append(el("span", code === 0 ? "ok" : "bad", " (" + ended + ")"));
      if (s.output && s.output.trim()) d.append(block(s.output));
    } else if (kind === "file_change") {
      label("files");
      d.append(document.createTextNode((s.changes || []).map((c) => `${c.kind} ${c.path}`).join(", ")));
    } else if (kind === "tool_call") {
      label("tool " + (s.name || ""));
      d.append(longText(typeof s.arguments === "string" ? s.arguments : JSON.stringify(s.arguments)));
    } else if (kind === "tool_result") {
      if (s.is_error) d.classList.add("is-error");
      label("result");
      d.append(longText(s.result));
    } else if (kind === "web_search") {
      label("search");
      d.append(document.createTextNode(s.query || ""));
    } else if (kind === "todo") {
      label("todo");
      d.append(document.createTextNode((s.items || []).map((i) => (i.completed ? "[x] " : "[ ] ") + i.text).join("; ")));
    } else if (kind === "error") {
      label(s.fatal ? "error" : "warning");
      d.append(document.createTextNode(s.message || ""));
    } else {
      label(kind);
      d.append(document.createTextNode(JSON.stringify(s)));
    }
    return d;
  }
  function shorten(text) {
    const lines = text.split("\n");
    let short = text;
    if (lines.length > SHORT_LINES) short = lines.slice(0, SHORT_LINES).join("\n");
    if (short.length > SHORT_CHARS) short = short.slice(0, SHORT_CHARS);
    return short === text ? null : short;
  }
  function longText(text) {
    const wrap = el("span");
    const node = el("span");
    wrap.append(node);
    setLong(wrap, node, String(text ?? ""));
    return wrap;
  }
  function block(text) {
    const wrap = el("div");
    const pre = el("pre");
    wrap.append(pre);
    setLong(wrap, pre, String(text));
    return wrap;
  }
  function setLong(wrap, node, text) {
    const short = shorten(text);
    if (short === null) {
      node.textContent = text;
      return;
    }
    node.textContent = short + "…";
    const more = el("span", "more", `show all (${text.length.toLocaleString()} chars)`);
    more.addEventListener("click", (e) => {
      e.stopPropagation();
      node.textContent = text;
      more.remove();
    });
    wrap.append(more);
  }

  // ------------------------------------------------------------------ tabs and diff
  function selectTab(name) {
    for (const b of $("tabs").querySelectorAll("button")) b.classList.toggle("on", b.dataset.tab === name);
    for (const t of ["steps", "turns", "diff"]) $("tab-" + t).hidden = t !== name;
    if (name === "diff") loadDiff();
  }
  async function loadDiff() {
    const view = state.view;
    if (!view) return;
    const box = $("diff");
    try {
      const d = await api("GET", `/api/sessions/${view.id}/diff?text=1`);
      if (state.view !== view) return;
      const wrap = el("div", "diff");
      const files = d.files || [];
      const totals = d.totals || {};
      wrap.append(el("p", "dim", `${files.length} file${files.length === 1 ? "" : "s"} changed` +
        (totals.added !== undefined ? `, +${totals.added} -${totals.removed}` : "") +
        (d.branch ? ` on ${d.branch}` : "")));
      if (d.note) wrap.append(el("p", "dim", d.note));
      const pre = el("pre");
      for (const line of String(d.text || "").split("\n")) {
        let cls = "";
        if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index ")) cls = "meta";
        else if (line.startsWith("+")) cls = "add";
        else if (line.startsWith("-")) cls = "del";
        else if (line.startsWith("@@")) cls = "hunk";
        pre.append(el("span", cls, line + "\n"));
      }
      if (d.text) wrap.append(pre);
      box.replaceChildren(wrap);
    } catch (e) {
      if (state.view === view) box.replaceChildren(el("p", "dim", e.message));
    }
  }

  // ------------------------------------------------------------------ actions
  function confirmDialog(text, ok) {
    return new Promise((resolve) => {
      const dlg = $("confirm-dialog");
      $("confirm-text").textContent = text;
      $("confirm-ok").textContent = ok;
      const done = (v) => {
        dlg.close();
        $("confirm-form").onsubmit = null;
        $("confirm-cancel").onclick = null;
        resolve(v);
      };
      $("confirm-form").onsubmit = (e) => {
        e.preventDefault();
        done(true);
      };
      $("confirm-cancel").onclick = () => done(false);
      dlg.oncancel = () => done(false);
      dlg.showModal();
    });
  }
  async function kill() {
    const view = state.view;
    if (!view) return;
    const name = view.detail.name || view.id.slice(0, 8);
    if (!(await confirmDialog(`Kill ${name}? Its agent's whole process tree is stopped and its queued messages are dropped.`, "Kill"))) return;
    try {
      const r = await api("POST", `/api/sessions/${view.id}/kill`);
      toast(`${name} killed` + (r.dropped_queued ? ` (dropped ${r.dropped_queued} queued)` : ""));
      refetch(view);
    } catch (e) {
      toast(e.message, true);
    }
  }
  async function remove() {
    const view = state.view;
    if (!view) return;
    const d = view.detail;
    const name = d.name || view.id.slice(0, 8);
    const active = ACTIVE.has(d.status);
    const what = active ? `${name} is ${d.status}: it will be killed, then removed with its files.` : `Remove ${name} and its files?`;
    if (!(await confirmDialog(what + " This cannot be undone.", "Remove"))) return;
    try {
      await api("DELETE", `/api/sessions/${view.id}` + (active ? "?force=1" : ""));
      toast(`${name} removed`);
      location.hash = "#/";
    } catch (e) {
      toast(e.message, true);
    }
  }
  async function inject(e) {
    e.preventDefault();
    const view = state.view;
    const text = $("inject-text").value;
    if (!view || !text.trim()) return;
    $("inject-btn").disabled = true;
    try {
      const r = await api("POST", `/api/sessions/${view.id}/messages`, { message: text });
      $("inject-text").value = "";
      toast(`turn ${r.turn} ${r.state}`);
      for (const w of r.warnings || []) toast(w, true);
      refetch(view);
    } catch (err) {
      toast(err.message, true);
    } finally {
      $("inject-btn").disabled = false;
    }
  }
  function openNew() {
    $("new-error").hidden = true;
    $("n-cwd").placeholder = (state.info && state.info.cwd) || "";
    $("new-dialog").showModal();
    $("n-task").focus();
  }
  async function submitNew(e) {
    e.preventDefault();
    const body = { task: $("n-task").value };
    const text = (id) => $(id).value.trim();
    if (text("n-adapter")) body.adapter = text("n-adapter");
    if (text("n-model")) body.model = text("n-model");
    if (text("n-name")) body.name = text("n-name");
    if (text("n-cwd")) body.cwd = text("n-cwd");
    if (text("n-timeout")) body.timeout = Number(text("n-timeout"));
    if ($("n-worktree").checked) body.worktree = true;
    if ($("n-dangerous").checked) body.dangerous = true;
    $("new-submit").disabled = true;
    try {
      const r = await api("POST", "/api/sessions", body);
      $("new-dialog").close();
      $("new-form").reset();
      for (const w of r.warnings || []) toast(w, true);
      location.hash = "#/s/" + r.id;
    } catch (err) {
      $("new-error").textContent = err.message;
      $("new-error").hidden = false;
    } finally {
      $("new-submit").disabled = false;
    }
  }

  // ------------------------------------------------------------------ start
  async function start() {
    state.token = readToken();
    if (!state.token) {
      noToken();
      return;
    }
    try {
      state.info = await api("GET", "/api/info");
    } catch (e) {
      if (e.status !== 401) toast(e.message, true);
      return;
    }
    for (const a of state.info.agents) $("n-adapter").append(el("option", "", a));
    $("n-dangerous-row").hidden = !state.info.allow_dangerous;
    $("diff-tab").hidden = !state.info.diff;
    $("new-btn").hidden = false;
    $("new-btn").addEventListener("click", openNew);
    $("new-cancel").addEventListener("click", () => $("new-dialog").close());
    $("new-form").addEventListener("submit", submitNew);
    $("inject-form").addEventListener("submit", inject);
    $("inject-text").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) inject(e);
    });
    $("kill-btn").addEventListener("click", kill);
    $("rm-btn").addEventListener("click", remove);
    $("queue-btn").addEventListener("click", queueMerge);
    $("merges-run").addEventListener("click", runMerges);
    $("usage-by").addEventListener("change", loadUsage);
    for (const b of $("tabs").querySelectorAll("button")) b.addEventListener("click", () => selectTab(b.dataset.tab));
    startBoard();
    window.addEventListener("hashchange", route);
    route();
  }
  start();
})();
