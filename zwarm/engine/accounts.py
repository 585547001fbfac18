"""Accounts: several logins of one agent, the one a turn runs on, and their cooldowns.

Owns ``[accounts.<agent>.<name>]`` as the engine uses them (``configured``: by ``priority``,
higher first, ties in the file's order), which account a queued turn may start on now
(``choose``: the first in that order with headroom, so new sessions stay on one account while
it has room, which keeps its prompt cache warm; a session already on one, or pinned to one by
``spawn --account``, stays on it), the account's environment given to its agent (``env_of``:
``${VAR}`` references filled in from the user's environment), each account's spend today
(``Spend``), its cooldown after a usage limit (``cool``, ``cooldown``: the files
``accounts/<agent>.<name>.json`` in the state dir) and what ``zwarm accounts`` says of each
(``states``). Must stay true:
- an account's ``env`` is used only as trusted (``Config.account_env``), for the account the
  session's launch pin names (``engine.finishing``), never one that meta.json or a cooldown file
  names; and only there: what an account set in an agent's environment is removed from every
  turn started from it (``with_account``), so it never reaches a turn on another account;
- a cooldown file is untrusted input (an agent may write the state dir): one strict schema, a
  link, a FIFO or a bad file is no file; it can only keep an account from taking new work, for
  at most ``MAX_COOLDOWN_S`` from now, never make one take work nor carry any env; it is
  written atomically under ``accounts/lock``, and a cooldown is only ever lengthened;
- an account's caps (``max_running``, ``budget_daily``) are caps like a group's: checked by the
  scheduler's pass, under its lock (``engine.scheduler``), never anywhere else;
- this module reads the config, sessions and files it is given; it starts or signals nothing.
"""

import os
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import msgspec
from msgspec import Meta

from zwarm.engine import limits
from zwarm.errors import InvalidInput, StoreError, ZwarmError, naming
from zwarm.model import Session
from zwarm.model.records import AGENT_NAME, NAME, Short
from zwarm.model.status import REASON_CODE
from zwarm.system.files import atomic_write, locked, read_file
from zwarm.text import usd

if TYPE_CHECKING:
    from zwarm.config import Config
    from zwarm.store import Store

MAX_COOLDOWN_S = 8 * 86400.0  # longer than any reset an agent reports (a weekly limit's)
COOLDOWN_MAX_BYTES = 64 * 1024
_NAME = re.compile(NAME)
_AGENT = re.compile(AGENT_NAME)
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Epoch = Annotated[float, Meta(ge=0, le=1e11)]


class Account(NamedTuple):
    """One configured account of an agent, its limits as trust allows them (0: none)."""

    agent: str
    name: str
    priority: int = 0
    max_running: int = 0
    budget_daily: float = 0.0


class Cooldown(msgspec.Struct, forbid_unknown_fields=True):
    """``accounts/<agent>.<name>.json``: the last limit the account hit, and until when it
    takes no new work (``until``; past, it is ready again)."""

    until: Epoch
    seen_at: Epoch
    reason: Annotated[str, Meta(pattern=REASON_CODE)]
    why: Short = ""


_decoder = msgspec.json.Decoder(Cooldown)


class AccountError(ZwarmError):
    """An account's env cannot be made (a ``${VAR}`` it names is not set)."""


# ---------------------------------------------------------------------- the config
def configured(config: "Config", agent: str) -> list[Account]:
    """``agent``'s accounts, by priority (higher first; equal ones in the file's order)."""
    out = []
    for name, t in config.accounts(agent).items():
        out.append(
            Account(
                agent,
                name,
                int(t.get("priority") or 0),
                int(t.get("max_running") or 0),
                float(t.get("budget_daily") or 0),
            )
        )
    return sorted(out, key=lambda a: -a.priority)


def any_configured(config: "Config") -> bool:
    """Whether any agent has an account (then every turn is routed by a scheduler pass)."""
    return any(config.data["accounts"].values())


def check_pin(config: "Config", agent: str, name: str | None) -> str | None:
    """``spawn --account NAME``: ``name`` if ``agent`` has that account, else ``InvalidInput``."""
    if name is None:
        return None
    names = [a.name for a in configured(config, agent)]
    if name not in names:
        have = ", ".join(names) if names else "none"
        raise naming(InvalidInput, lambda n: (
            f"{n('account')} {name}: {agent} has no such account ([accounts.{agent}.*]: {have})"
        ))  # fmt: skip
    return name


def env_of(config: "Config", agent: str, name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Account ``name`` of ``agent``: its ``env`` (trusted: ``UntrustedConfig`` otherwise),
    each ``${VAR}`` in a value replaced by the user's ``VAR`` (``AccountError`` if unset), so
    the file names a secret without holding it. ``AccountError`` if the account is gone."""
    if name not in config.accounts(agent):
        raise AccountError(f"account {name!r} of {agent} is no longer in the config")
    out = {}
    for key, value in config.account_env(agent, name).items():
        missing = [v for v in _REF.findall(value) if v not in environ]
        if missing:
            raise AccountError(
                f"account {name} of {agent}: its env {key} names ${{{missing[0]}}}, "
                "which is not set in your environment"
            )
        out[key] = _REF.sub(lambda m: environ[m.group(1)], value)
    return out


ENV_VAR = "ZWARM_ACCOUNT_ENV"  # in an agent's environment: the variables its account set


def with_account(env: dict[str, str], account: Mapping[str, str]) -> dict[str, str]:
    """A turn's environment ``env`` (its command's, made for the agent) with the variables an
    account set in an earlier agent removed (``ENV_VAR`` names them: that agent's command, a
    child it spawns or a queued turn its ``zwarm`` call starts, carries them), then
    ``account``'s env (the turn's own account's, or none) applied and named there: one
    account's login never reaches a turn on another through the environment."""
    for name in env.pop(ENV_VAR, "").split(","):
        if name and name != ENV_VAR:
            env.pop(name, None)
    env.update(account)
    if account:
        env[ENV_VAR] = ",".join(sorted(account))
    return env


# ---------------------------------------------------------------------- cooldowns
def _dir(store: "Store") -> Path:
    return store.root / "accounts"


def _path(store: "Store", agent: str, name: str) -> Path:
    if not _AGENT.match(agent) or not _NAME.match(name):
        raise InvalidInput(f"not an account: {agent}.{name}")
    return _dir(store) / f"{agent}.{name}.json"


def cooldown(store: "Store", agent: str, name: str, now: float) -> Cooldown | None:
    """Account ``name``'s last recorded limit (its ``until`` no later than
    ``MAX_COOLDOWN_S`` from ``now``), or None (none, or not a valid file: untrusted)."""
    try:
        raw, _ = read_file(_path(store, agent, name), COOLDOWN_MAX_BYTES)
        c = _decoder.decode(raw)
    except (OSError, InvalidInput, msgspec.DecodeError):
        return None
    if c.until > now + MAX_COOLDOWN_S:
        c.until = now + MAX_COOLDOWN_S
    return c


def cool(
    store: "Store", agent: str, name: str, until: float, reason: str, why: str, now: float
) -> Cooldown:
    """Record that account ``name`` of ``agent`` hit a limit (``reason``, ``why``) and takes
    no new work until ``until`` (never shortened; at most ``MAX_COOLDOWN_S`` from now).
    ``StoreError`` if it cannot be written."""
    d = _dir(store)
    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        if not os.path.isdir(d) or os.path.islink(d):
            raise StoreError(f"{d} is not a directory (a link?)") from None
    except OSError as e:
        raise StoreError(f"cannot create {d}: {e.strerror}") from None
    path = _path(store, agent, name)
    try:
        with locked(d / "lock"):
            old = cooldown(store, agent, name, now)
            if old is not None and old.until > until:
                until = old.until
            c = Cooldown(min(until, now + MAX_COOLDOWN_S), now, reason, why[:4000])
            atomic_write(path, msgspec.json.encode(c))
    except OSError as e:
        raise StoreError(f"cannot record account {name}'s cooldown: {e.strerror}") from None
    return c


def cooling(store: "Store", agent: str, name: str, now: float) -> Cooldown | None:
    """Account ``name``'s cooldown if it still runs at ``now``."""
    c = cooldown(store, agent, name, now)
    return c if c is not None and c.until > now else None


# ---------------------------------------------------------------------- headroom
class Spend:
    """Each account's spend today (local day), from the sessions' recorded turns."""

    def __init__(self, sessions: Iterable[Session], now: float) -> None:
        from zwarm.env import parse_iso

        self.by: dict[tuple[str, str], float] = {}
        day = limits.today(now)
        for s in sessions:
            for ended_at, cost, account in s.account_costs():
                try:
                    when = parse_iso(ended_at)
                except ValueError:
                    continue
                if limits.today(when) != day:
                    if when < now - 86400:
                        break  # in order: the older ones ended before today too
                    continue
                if account is not None:
                    key = (s.adapter, account)
                    self.by[key] = self.by.get(key, 0.0) + cost

    def of(self, a: Account) -> float:
        return self.by.get((a.agent, a.name), 0.0)


def why_not(
    store: "Store", a: Account, running: int, spend: Spend | None, now: float
) -> tuple[str, str] | None:
    """Why account ``a`` takes no new turn now: (``cooling``, ``over_budget`` or ``full``,
    saying so), or None: it has headroom."""
    c = cooling(store, a.agent, a.name, now)
    if c is not None:
        return "cooling", f"account {a.name} cooling down until {clock(c.until, now)} ({c.reason})"
    if a.budget_daily and spend is not None and spend.of(a) >= a.budget_daily:
        return "over_budget", (
            f"account {a.name} over budget: {usd(spend.of(a))} spent today "
            f"(budget_daily {usd(a.budget_daily)})"
        )
    if a.max_running and running >= a.max_running:
        return "full", f"account {a.name} full: {running} running (max_running = {a.max_running})"
    return None


def choose(
    config: "Config",
    store: "Store",
    s: Session,
    running: Mapping[tuple[str, str], int],
    spend: Spend | None,
    now: float,
) -> tuple[str | None, str | None]:
    """(the account ``s``'s queued turn starts on, None) or (None, why it waits); (None, None)
    when its agent has no accounts. A new session takes the first account by priority with
    headroom; one pinned to an account, or whose turn resumes its agent's own session there
    (native), stays on it; another follow-up (a summary one: a new agent session anyway)
    stays on its account while it has headroom, else takes the first other one that has."""
    accounts = configured(config, s.adapter)
    if not accounts:
        return None, None
    if s.account is not None:
        own = [a for a in accounts if a.name == s.account]
        t = s.current
        movable = not s.account_pinned and t is not None and t.context != "native"
        if own and movable:
            accounts = own + [a for a in accounts if a.name != s.account]
        elif own:
            accounts = own
        elif s.account_pinned:
            return None, f"waiting: account {s.account} of {s.adapter} is no longer configured"
    reasons = []
    for a in accounts:
        why = why_not(store, a, running.get((a.agent, a.name), 0), spend, now)
        if why is None:
            return a.name, None
        reasons.append(why[1])
    return None, "waiting for an account: " + "; ".join(reasons)


def earliest_reset(config: "Config", store: "Store", agent: str, now: float) -> float | None:
    """When the first of ``agent``'s cooling accounts is ready again (None: one is ready now,
    or it has none)."""
    times = []
    for a in configured(config, agent):
        c = cooling(store, a.agent, a.name, now)
        if c is None:
            return None
        times.append(c.until)
    return min(times) if times else None


def ready_other(config: "Config", store: "Store", agent: str, name: str, now: float) -> str | None:
    """Another account of ``agent`` than ``name`` that is not cooling down (the first by
    priority), or None."""
    for a in configured(config, agent):
        if a.name != name and cooling(store, agent, a.name, now) is None:
            return a.name
    return None


def clock(when: float, now: float) -> str:
    """``when`` as the local HH:MM (with the date when it is not today)."""
    if limits.today(when) == limits.today(now):
        return time.strftime("%H:%M", time.localtime(when))
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


# ---------------------------------------------------------------------- zwarm accounts
def states(config: "Config", store: "Store", now: float) -> list[dict[str, Any]]:
    """Every configured account with its state: ``ready``, ``cooling`` (until, why),
    ``over_budget`` or ``full``; today's spend, running sessions, the last limit seen."""
    from zwarm.env import iso
    from zwarm.model import RUNS

    sessions = []
    for sid in store.list_ids():
        got = store.read(sid)
        if isinstance(got, Session):
            sessions.append(got)
    running: Counter[tuple[str, str]] = Counter(
        (s.adapter, s.account) for s in sessions if s.status in RUNS and s.account
    )
    spend = Spend(sessions, now)
    out = []
    for agent in sorted(config.data["accounts"]):
        for a in configured(config, agent):
            n = running[(agent, a.name)]
            c = cooldown(store, agent, a.name, now)
            state, why = why_not(store, a, n, spend, now) or ("ready", None)
            last = None
            if c is not None:
                last = {"reason": c.reason, "why": c.why, "at": iso(c.seen_at)}
            out.append(
                {
                    "agent": agent,
                    "name": a.name,
                    "priority": a.priority,
                    "state": state,
                    "why": why,
                    "until": iso(c.until) if c is not None and c.until > now else None,
                    "running": n,
                    "max_running": a.max_running or None,
                    "spent_today_usd": round(spend.of(a), 6),
                    "budget_daily_usd": a.budget_daily or None,
                    "last_limit": last,
                }
            )
    return out
