"""The fleet's scheduler: which waiting session starts next, and never more than the caps.

Owns the state dir's queue of waiting sessions (a ``queued`` or ``parked`` latest turn), the
scheduler lock, and the *pass* that starts them: caps (``[limits] max_running``, an agent's
``max_running``, ``[groups.NAME] max_running``, ``[limits] max_cost_per_day``, and each
account's ``max_running``, ``budget_daily`` and cooldown, choosing the account a turn starts on:
``engine.accounts``), ``--after``
dependencies, ``--priority`` then FIFO order, and resuming parked turns at their time. It works
whatever launcher runs a turn: it starts a turn through its manager (``_start``: the launcher).

How the design guarantees its two promises:

*Never more than a cap running.* A session goes from not running to running only in a pass
(a queued turn starting), and a pass holds the scheduler lock (``flock`` on
``scheduler/lock``) from before it counts until after it has started what fits. It counts
from every session's meta.json, read under that lock, and a turn is recorded running in the
same transaction that starts it, so the next pass (serialized by the lock) counts it. A
session stops running without the lock, which only lowers the count, and a follow-up from a
running session's own queue continues in the slot it holds. Spawns from many processes at
once each take the lock, create their session queued and run a pass; at most the cap ever
runs.

*No waiting session is stranded.* Every waiting session has a file ``scheduler/waiting/<id>``:
it is written before meta.json says the session waits (under the session lock, or under the
scheduler lock for a new session) and removed only by a pass, under the session lock, once
meta.json says it no longer waits (a pass also re-creates a missing one). A pass runs after
every event that can let a waiting session start: a turn's end (its supervisor, which waits
for the lock), a kill, a spawn, inject, retry or resume that queued, a parked turn's time
(its supervisor sleeps until then), an account's reset while a session of its agent is queued
and every account of that agent cools down (the supervisor of the last turn of that agent to
end sleeps until then: ``account_reset``), and at the start of every zwarm command that finds a
waiting file (``tick``, which waits briefly for the lock). A process killed (SIGKILL) at any
point between an event and its pass leaves the waiting file, and its lock dies with it, so the
next zwarm command, or the next supervisor to end a turn, runs the pass; a pass killed
half-way leaves the rest queued and waiting files in place. A supervisor started by a pass that
died before recording the start finds its turn still queued and runs nothing (the next pass
starts it again).

Must stay true: this module starts turns only through ``transitions.start`` plus the
manager's launcher, under the scheduler lock, and never signals a process; every file it
reads is untrusted (a waiting file is only a hint: meta.json decides); no wait for the lock is
silent or endless: past ``NOTICE_AFTER_S`` it says who holds it (the kernel's ``/proc/locks``,
never a file), and it ends after a bound (``LOCK_WAIT_S``, ``ZWARM_LOCK_WAIT_S``).
"""

import contextlib
import errno
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from zwarm.engine import accounts, limits, transitions
from zwarm.env import parse_iso
from zwarm.errors import DamagedSession, SessionNotFound, StoreError, ZwarmError
from zwarm.model import RUNS, WAITING, Reason, Session, Status, Turn
from zwarm.system.files import CLOEXEC, NOFOLLOW, open_lock, take_lock
from zwarm.text import usd

if TYPE_CHECKING:
    from zwarm.config import Config
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.env import Env
    from zwarm.store import Store

TICK_WAIT_S = 5.0  # how long a command waits for another pass to end before going on
# how long a command that must run a pass (spawn, kill, inject) waits for the lock held by
# another process; ZWARM_LOCK_WAIT_S sets it (seconds). A spawn gives up with one line and
# creates nothing; another command leaves the pass to the next command (its waiting file stays)
LOCK_WAIT_S = 60.0
NOTICE_AFTER_S = 1.0  # a wait this long is said (``Env.notice``): who holds the lock
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def waiting_dir(store: "Store") -> Path:
    """Where the waiting files are: ``scheduler/waiting/<id>`` in the state dir."""
    return store.waiting


def pending(store: "Store") -> bool:
    """Whether any session waits (one directory read: what every command checks first)."""
    return store.pending()


def capped(config: "Config") -> bool:
    """Whether any cap is configured: then every session or turn that would start running is
    queued first and started by a pass."""
    lim = config.table("limits")
    if lim["max_running"] or lim["max_cost_per_day"]:
        return True
    if any(g.get("max_running") for g in config.groups().values()):
        return True
    if accounts.any_configured(config):  # every turn is routed to an account by a pass
        return True
    return any(_agent_cap(config, table) for table in config.data)


def _agent_cap(config: "Config", adapter: str) -> int:
    from zwarm.config import SCHEMA

    if adapter in SCHEMA:
        return 0
    if adapter not in config.data:
        return 0
    value = config.table(adapter).get("max_running", 0)
    return value if isinstance(value, int) else 0


class Report(msgspec.Struct):
    """What one pass did: sessions started, ended without starting, resumed from parking."""

    started: list[str] = msgspec.field(default_factory=list)
    ended: list[str] = msgspec.field(default_factory=list)
    resumed: list[str] = msgspec.field(default_factory=list)


class _Running(msgspec.Struct):
    """How many sessions run, in all and per agent, group and account."""

    total: int = 0
    agents: Counter[str] = msgspec.field(default_factory=Counter)
    groups: Counter[str] = msgspec.field(default_factory=Counter)
    accounts: Counter[tuple[str, str]] = msgspec.field(default_factory=Counter)

    def add(self, s: Session) -> None:
        self.total += 1
        self.agents[s.adapter] += 1
        if s.group:
            self.groups[s.group] += 1
        if s.account:
            self.accounts[(s.adapter, s.account)] += 1


class Scheduler:
    """The scheduler of one state dir, with one configuration."""

    def __init__(
        self,
        store: "Store",
        config: "Config",
        env: "Env",
        classes: "Callable[[str], type[BaseSessionManager]]",
    ) -> None:
        """``classes``: ``zwarm.engine.manager_class`` (handed in: the manager imports this
        module, so this one never imports the managers)."""
        self.store = store
        self.config = config
        self.env = env
        self._classes = classes
        self.waiting = waiting_dir(store)
        self.dir = self.waiting.parent
        self._managers: dict[str, BaseSessionManager] = {}

    def manager(self, adapter: str) -> "BaseSessionManager":
        if adapter not in self._managers:
            self._managers[adapter] = self._classes(adapter)(self.store, self.config, self.env)
        return self._managers[adapter]

    # ------------------------------------------------------------------ the lock
    @contextlib.contextmanager
    def locked(self, timeout: float | None = None) -> Iterator[bool]:
        """Hold the scheduler lock for the block (True), or yield False if another process
        held it for ``timeout`` seconds (None: ``lock_wait()``). A wait past
        ``NOTICE_AFTER_S`` is said once (``Env.notice``), naming the process holding it."""
        self._ensure()
        try:
            fd = open_lock(self.dir / "lock")
        except OSError as e:
            raise StoreError(f"cannot open the scheduler lock: {e.strerror}") from None
        notice = self.env.notice

        def waiting() -> None:
            if notice is not None:
                notice(f"waiting for the scheduler lock held by {lock_holder(fd)}")

        try:
            wait = self.lock_wait() if timeout is None else timeout
            yield take_lock(fd, wait, waiting, NOTICE_AFTER_S)
        finally:
            os.close(fd)

    def lock_wait(self) -> float:
        """How long a command that must run a pass waits for the lock (``LOCK_WAIT_S``, or
        ``ZWARM_LOCK_WAIT_S`` when it is a positive number of seconds)."""
        raw = self.env.environ.get("ZWARM_LOCK_WAIT_S", "")
        try:
            value = float(raw)
        except ValueError:
            return LOCK_WAIT_S
        return value if 0 < value <= 1e9 else LOCK_WAIT_S

    def _busy(self) -> StoreError:
        return StoreError(
            f"the scheduler lock is still held after {self.lock_wait():g} s (by "
            f"{lock_holder_of(self.dir / 'lock')}): gave up, nothing was started; "
            "ZWARM_LOCK_WAIT_S sets how long to wait"
        )

    def _ensure(self) -> None:
        for d in (self.dir, self.waiting):
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                if not os.path.isdir(d) or os.path.islink(d):
                    raise StoreError(f"{d} is not a directory (a link?)") from None
            except OSError as e:
                raise StoreError(f"cannot create {d}: {e.strerror}") from None

    # ------------------------------------------------------------------ waiting files
    def mark(self, sid: str) -> None:
        """Note that ``sid`` waits (before meta.json says so; see the module docstring)."""
        self.store.session_dir(sid)  # a session id, never a path
        self._ensure()
        try:
            fd = os.open(self.waiting / sid, os.O_WRONLY | os.O_CREAT | NOFOLLOW | CLOEXEC, 0o600)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise StoreError(f"cannot note session {sid} as waiting: {e.strerror}") from None
            os.unlink(self.waiting / sid)  # a planted link: replaced, never followed
            fd = os.open(self.waiting / sid, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)

    def _marked(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.waiting) if _ID.match(n)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def pending(self) -> bool:
        """Whether any session waits (see the module function)."""
        return pending(self.store)

    def account_reset(self, agent: str) -> tuple[bool, float | None]:
        """Whether a session of ``agent`` is queued while it has accounts, and when the first
        of them, all cooling down, is ready again (None: one is ready now): a supervisor
        waits for that time as for a parked turn's, then runs a pass
        (``runtime.supervisor``). Read from the waiting files and meta.json, no lock."""
        if not accounts.configured(self.config, agent):
            return False, None
        queued = False
        for sid in self._marked():
            s = self.store.read(sid)
            if isinstance(s, Session) and s.status is Status.QUEUED and s.adapter == agent:
                queued = True
                break
        if not queued:
            return False, None
        return True, accounts.earliest_reset(self.config, self.store, agent, self.env.clock())

    def _unmark(self, sid: str) -> None:
        """Drop ``sid``'s waiting file if its meta.json says it no longer waits (decided
        under the session lock, where a new wait is written)."""
        try:
            with self.store.lock(sid):
                if self.store.load(sid).status in WAITING:
                    return
                _unlink(self.waiting / sid)
        except (SessionNotFound, DamagedSession):
            _unlink(self.waiting / sid)

    # ------------------------------------------------------------------ passes
    def tick(self) -> Report | None:
        """A pass if any session waits (a command's first step); None if none ran."""
        if not self.pending():
            return None
        return self.run(TICK_WAIT_S)

    def run(self, timeout: float | None = None) -> Report | None:
        """One pass under the lock (None if another held it for ``timeout`` seconds; None:
        ``lock_wait()``, after which the pass is left to the next command, as if this process
        had been killed: the waiting files stay)."""
        with self.locked(timeout) as got:
            return self._pass() if got else None

    def admit_new(self, s: Session, create: Callable[[], None]) -> Session:
        """Create new session ``s`` (``create``) queued, and run a pass, under the lock;
        ``StoreError`` (nothing created) if another process holds it past ``lock_wait()``."""
        self.store.ensure()
        with self.locked() as got:
            if not got:
                raise self._busy()
            transitions.defer(s, s.turns[0], s.created_at)
            self.mark(s.id)
            create()
            self._pass()
        return self.store.load(s.id)

    def _pass(self) -> Report:
        report = Report()
        now = self.env.clock()
        found = self._scan()
        self._survey(found)
        for sid, s in list(found.items()):
            if isinstance(s, Session):
                found[sid] = self._settled(s, now, report)
        sessions = [s for s in found.values() if isinstance(s, Session)]
        running = _Running()
        for s in sessions:
            if s.status in RUNS:
                running.add(s)
        spend = self._spend(sessions, now)
        by_account = accounts.Spend(sessions, now) if accounts.any_configured(self.config) else None
        for s in sorted((s for s in sessions if s.status is Status.QUEUED), key=_order):
            self._consider(s, found, running, spend, report, by_account)
        self._upkeep(found)
        return report

    def _survey(self, found: dict[str, Session | DamagedSession]) -> None:
        """Ask each launcher that answers many turns at once (a cluster's queue) about every
        running turn first, so the reconciles of ``_settled`` do not ask one by one."""
        from zwarm.launchers import get_launcher, survey

        items = [
            (sid, s.current)
            for sid, s in found.items()
            if isinstance(s, Session) and s.current is not None and s.status in RUNS
        ]
        if items:
            survey(items, lambda name: get_launcher(name, self.store, self.env), batched=True)

    def _scan(self) -> dict[str, Session | DamagedSession]:
        found: dict[str, Session | DamagedSession] = {}
        for sid in self.store.list_ids():
            found[sid] = self.store.read(sid)
        return found

    def _settled(self, s: Session, now: float, report: Report) -> Session:
        """``s`` with a lost running turn reconciled (its slot freed) and a parked turn whose
        time has come resumed (a new queued turn)."""
        try:
            mgr = self.manager(s.adapter)
            if s.status in RUNS:
                return mgr.reconcile(s)
            t = s.current
            if s.status is Status.PARKED and t is not None and _due(t.parked_until, now):
                s, _ = mgr.rerun(s.id, "auto", schedule=False)
                report.resumed.append(s.id)
        except ZwarmError:
            pass  # left as it is; listed as it is by ls
        return s

    def _spend(self, sessions: list[Session], now: float) -> float:
        if not self.config.get("limits", "max_cost_per_day"):
            return 0.0
        return limits.spent_today(sessions, now)

    def _consider(
        self,
        s: Session,
        found: dict[str, Session | DamagedSession],
        running: _Running,
        spend: float,
        report: Report,
        by_account: accounts.Spend | None = None,
    ) -> None:
        """Start queued ``s`` if it may (on the account ``accounts.choose`` routes it to), end
        it if a dependency failed, else say why it waits (on its turn, only when that
        changes)."""
        t = s.current
        assert t is not None
        after: list[Turn] = []  # what its launcher makes it wait for (a Slurm dependency)
        if t.n == 1 and s.after:
            waiting, failed = _dependencies(s, found)
            if failed is not None:
                self._end(s, failed)
                report.ended.append(s.id)
                return
            after = self._launcher_waits(s, waiting, found) if waiting else []
            if waiting and not after:
                self._note(s, "waiting for " + ", ".join(w[:8] for w in waiting))
                return
        why = self._cap(s, running, spend)
        account = None
        if why is None:
            now = self.env.clock()
            account, why = accounts.choose(
                self.config, self.store, s, running.accounts, by_account, now
            )
        if why is not None:
            self._note(s, why)
            return
        if self._start(s, after, account):
            s.account = account
            running.add(s)
            report.started.append(s.id)

    def _cap(self, s: Session, running: _Running, spend: float) -> str | None:
        """Which cap keeps ``s`` waiting, or None."""
        lim = self.config.table("limits")
        most = lim["max_running"]
        if most and running.total >= most:
            return f"waiting for a slot: {running.total} running ([limits] max_running = {most})"
        most = _agent_cap(self.config, s.adapter)
        if most and running.agents[s.adapter] >= most:
            n = running.agents[s.adapter]
            return (
                f"waiting for a slot: {n} {s.adapter} running ([{s.adapter}] max_running = {most})"
            )
        group = self.config.groups().get(s.group, {}) if s.group else {}
        most = group.get("max_running", 0)
        if most and running.groups[s.group or ""] >= most:
            n = running.groups[s.group or ""]
            return f"waiting for a slot: {n} of group {s.group} running (max_running = {most})"
        day = lim["max_cost_per_day"]
        if day and spend >= day:
            return (
                f"waiting for tomorrow: today's spend {usd(spend)} reached "
                f"[limits] max_cost_per_day {usd(day)}"
            )
        return None

    def _launcher_waits(
        self, s: Session, waiting: list[str], found: dict[str, Session | DamagedSession]
    ) -> list[Turn]:
        """The running turns of the sessions ``s`` waits for, if ``s``'s launcher can make it
        wait for them itself (a cluster's job dependencies: ``Launcher.can_wait_for``); else
        none, and zwarm waits. Whoever runs its turn checks again (``held``)."""
        turns = []
        for sid in waiting:
            d = found.get(sid)
            if not isinstance(d, Session) or d.current is None:
                return []
            turns.append(d.current)
        try:
            mine = self.manager(s.adapter).launcher(s.current or turns[0])
            return turns if mine.can_wait_for(turns) else []
        except ZwarmError:
            return []

    def held(self, sid: str) -> bool:
        """Whether the first turn of ``sid``, started while it waited for its ``--after``
        sessions (``_launcher_waits``), must not run now that it is about to: a dependency
        that failed ends it (``dependency_failed``); one still active (a follow-up began
        meanwhile) puts it back in the queue for a pass. False: it may run."""
        s = self.store.load(sid)
        t = s.current
        if t is None or t.n != 1 or not s.after or t.status not in RUNS:
            return False
        ids = set(self.store.list_ids())
        waiting, failed = _dependencies(s, {d: self.store.read(d) for d in s.after if d in ids})
        if failed is None and not waiting:
            return False
        with self.store.transaction(sid) as fresh:
            t = fresh.current
            if t is None or t.n != 1 or t.status not in RUNS or t.agent is not None:
                return True
            now = self.env.now_iso()
            if failed is not None:
                transitions.end(fresh, t, Status.FAILED, now, Reason.DEPENDENCY_FAILED, failed)
                fresh.queue.clear()
                return True
            self.mark(sid)
            t.handle, t.supervisor = None, None
            transitions.defer(fresh, t, now)
        return True

    def _start(
        self, s: Session, after: list[Turn] | None = None, account: str | None = None
    ) -> bool:
        """Start ``s``'s queued turn (its launcher, in the transaction that records it),
        made to wait for the turns ``after`` by its launcher, on ``account`` (recorded in
        its launch pin first: what its agent's env comes from)."""
        mgr = self.manager(s.adapter)
        with self.store.transaction(s.id) as fresh:
            t = fresh.current
            if t is None or t.status is not Status.QUEUED:
                return False  # killed (or started) since the scan
            now = self.env.now_iso()
            transitions.start(fresh, t, now)
            try:
                if account is not None:
                    mgr.use_account(fresh, account)
                mgr._start(fresh, t, after or (), fresh.after_any)
            except ZwarmError as e:  # e.g. its launcher is not installed
                why = f"could not start the turn: {e}"
                transitions.end(fresh, t, Status.FAILED, now, Reason.START_FAILED, why)
            return t.status in RUNS

    def _end(self, s: Session, why: str) -> None:
        with self.store.transaction(s.id) as fresh:
            t = fresh.current
            if t is not None and t.status is Status.QUEUED:
                now = self.env.now_iso()
                transitions.end(fresh, t, Status.FAILED, now, Reason.DEPENDENCY_FAILED, why)
                fresh.queue.clear()

    def _note(self, s: Session, why: str) -> None:
        t = s.current
        if t is None or t.wait == why:
            return
        with self.store.transaction(s.id) as fresh:
            t = fresh.current
            if t is not None and t.status is Status.QUEUED:
                t.wait = why[:4000]

    def _upkeep(self, found: dict[str, Session | DamagedSession]) -> None:
        """Waiting files: one for every waiting session, none for any other."""
        waiting = {
            sid for sid, s in found.items() if isinstance(s, Session) and s.status in WAITING
        }
        marked = set(self._marked())
        for sid in waiting - marked:
            with contextlib.suppress(ZwarmError):
                self.mark(sid)
        for sid in marked - waiting:
            with contextlib.suppress(ZwarmError, OSError):
                self._unmark(sid)


# ---------------------------------------------------------------------- helpers
def _order(s: Session) -> tuple[int, str, str]:
    """Priority first (higher first), then first queued first."""
    t = s.current
    queued = (t.queued_at or t.started_at) if t is not None else s.created_at
    return (-s.priority, queued, s.id)


def _due(when: str | None, now: float) -> bool:
    if when is None:
        return True
    try:
        return parse_iso(when) <= now
    except ValueError:
        return True  # unreadable: resume now rather than never


def _dependencies(
    s: Session, found: dict[str, Session | DamagedSession]
) -> tuple[list[str], str | None]:
    """(the sessions ``s`` still waits for, why it can never start or None)."""
    waiting: list[str] = []
    for dep in s.after:
        d = found.get(dep)
        if not isinstance(d, Session):
            if s.after_any:
                continue
            what = "was removed" if d is None else f"is damaged ({d.problem})"
            return waiting, f"dependency failed: session {dep} {what}"
        if not d.status.finished:
            waiting.append(dep)
        elif d.status is not Status.COMPLETED and not s.after_any:
            reason = f", {d.reason}" if d.reason and d.reason != d.status.value else ""
            return waiting, f"dependency failed: session {dep} ended {d.status.value}{reason}"
    return waiting, None


def lock_holder(fd: int) -> str:
    """Which process holds the ``flock`` on ``fd``'s file, as the kernel says
    (``/proc/locks``: never a file anyone can write): "pid N (its command line)", or
    "another process" when that cannot be told."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", "rb") as f:
            table = f.read(1 << 20).decode("ascii", "replace")
    except OSError:
        return "another process"
    me = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == me and parts[4].isdigit():
            return f"pid {parts[4]} ({_command(int(parts[4]))})"
    return "another process"


def lock_holder_of(path: Path) -> str:
    """``lock_holder`` of the file at ``path`` (no link followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    except OSError:
        return "another process"
    try:
        return lock_holder(fd)
    finally:
        os.close(fd)


def _command(pid: int) -> str:
    """Process ``pid``'s command line, shortened (what a user reads to know it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return "gone"
    from zwarm.text import clip  # only when a process is reported

    return clip(" ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a), 80)


def _unlink(path: os.PathLike[str] | str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
