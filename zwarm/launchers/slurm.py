"""``SlurmLauncher``: each turn runs as one Slurm batch job, its supervisor on a compute node.

Owns submitting a turn's job (``sbatch``), asking Slurm where its jobs stand (one ``squeue``
for every turn a listing asks about; ``sacct`` only for a job ``squeue`` no longer knows),
cancelling them (``scancel``), what a job's end means for a turn its supervisor did not
record (its own reasons: ``slurm_timeout``, ``slurm_node_fail``, ``slurm_preempted``,
``slurm_cancelled``), and the ``[slurm]`` config table (``SETTINGS``: each key's shape, doc
and trust rule; ``partition``, ``qos``, ``time``, ``cpus``, ``mem`` may also be set per
session: ``spawn --launcher-option``).
The job runs ``python -I -m zwarm.runtime.supervisor --turn N STATE_DIR ID``, which runs that
one turn and has the next queued one submitted as a job of its own. Must stay true:
- ``sbatch`` gets an argv, never a shell command line with user text: the job script (on its
  stdin) holds only zwarm's own values (the interpreter, the state dir, the session id, the
  turn number), each shell-quoted; the prompt stays in its file;
- environment *values* never reach argv, the job script or any file of zwarm's:
  ``--export`` names the variables and ``sbatch`` reads their values from its own
  environment (Slurm's controller keeps a batch job's environment while it knows the job);
- a job id read back from ``meta.json`` is untrusted: used only if it is digits (``JOB_ID``)
  and only ever as one argv element; it is never signalled: ``stop`` cancels only the job
  zwarm recorded submitting for that turn (``store.pins``: the handle record, written by
  ``start`` where the agent cannot write, before the turn naming it is saved) and only if
  Slurm reports it as the session's (its name is ``job_name``, its owner this user), with
  the name as ``scancel``'s own filter; anything else is refused and said; and a turn's
  state is that of the job recorded for it (``_watched``), so a job ``meta.json`` names
  instead never keeps a turn that ended "running";
- every Slurm command runs under a short timeout: a slow or dead controller answers
  ``unknown`` (``Probe.shown``), never hangs a listing, and never ends a turn;
- a compute node runs a turn only if its job is the one zwarm recorded submitting for the
  turn (``runs_here``);
- the state dir must be at the same path on every node (a shared filesystem): a state dir on
  a filesystem other nodes certainly cannot see (tmpfs, overlay) is refused when the
  partition has other nodes;
- every ``[slurm]`` value that reaches ``sbatch`` has Slurm's own shape (``SETTINGS``'
  patterns, checked by the config when the file is read): one argv element, never an option;
- importing this module is cheap (the config asks for its table on every load): subprocess,
  socket and the like are imported where Slurm is asked.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from zwarm.launchers.base import NO_SETTINGS, Failure, Launcher, Probe
from zwarm.rules import FREE, Setting

if TYPE_CHECKING:
    import subprocess

    from zwarm.env import Env
    from zwarm.model import Turn
    from zwarm.store import Store

# the cluster job that ran the turn ended before its supervisor recorded it
TIMEOUT = "slurm_timeout"
NODE_FAIL = "slurm_node_fail"
PREEMPTED = "slurm_preempted"
CANCELLED = "slurm_cancelled"
REASONS: Mapping[str, Failure] = MappingProxyType(
    {
        TIMEOUT: Failure("slurm timeout", "the job reached its Slurm time limit"),
        NODE_FAIL: Failure("node fail", "its node failed (or failed to boot)"),
        PREEMPTED: Failure("preempted", "Slurm preempted it for other work"),
        CANCELLED: Failure("cancelled", "cancelled outside zwarm (scancel, an administrator)"),
    }
)
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*\Z"
# [slurm]: one batch job per turn; "" / 0 = Slurm's default. Values go to sbatch as they are,
# so each has Slurm's shape (one argv element each: never an option)
SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        "partition": Setting(
            (str,),
            "",
            doc='Partition of the turns\' jobs (sbatch --partition); "" = the default.',
            trust=FREE,
            pattern=r"^([A-Za-z0-9][A-Za-z0-9._,-]{0,199})?\Z",
            shape="a partition name",
        ),
        "account": Setting(
            (str,),
            "",
            doc='Account the jobs are charged to (--account); "" = your default.',
            pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]{0,199})?\Z",
            shape="an account name",
        ),
        "qos": Setting(
            (str,),
            "",
            doc='Quality of service of the jobs (--qos); "" = the default.',
            trust=FREE,
            pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]{0,199})?\Z",
            shape="a QOS name",
        ),
        "time": Setting(  # per-turn wall limit; --timeout also sets it
            (str,),
            "",
            doc='Wall limit of each turn\'s job ("30", "2:00:00"); --timeout also sets it.',
            trust=FREE,
            pattern=r"^((\d+-)?\d+(:\d+){0,2}|UNLIMITED|INFINITE)?\Z",
            shape='a Slurm time ("30", "1:00:00", "2-00:00:00")',
        ),
        "cpus": Setting(
            (int,),
            0,
            doc="CPUs per turn (--cpus-per-task); 0 = the partition's default.",
            trust=FREE,
        ),
        "mem": Setting(
            (str,),
            "",
            doc='Memory per turn ("4G"; --mem); "" = the partition\'s default.',
            trust=FREE,
            pattern=r"^(\d+[KMGT]?)?\Z",
            shape='a Slurm memory size ("4G", "500M")',
        ),
        "extra_args": Setting((list,), [], doc="More sbatch arguments for every turn's job."),
        "env": Setting(  # names only: sbatch reads the values from its own environment
            (list,),
            [],
            doc="Names of variables exported to the jobs (API keys...); zwarm writes no value.",
            pattern=_ENV_NAME,
            shape="a list of environment variable names",
        ),
        "python": Setting(  # the interpreter with zwarm on the nodes
            (str,),
            "",
            doc='Python with zwarm on the compute nodes; "" = the one running zwarm here.',
            pattern=r"^(/[^\x00\n]*)?\Z",
            shape="an absolute path",
        ),
    }
)

JOB_ID = re.compile(r"^[1-9][0-9]{0,11}\Z")
QUERY_TIMEOUT_S = 5.0  # squeue, sacct, scancel, sinfo: longer means "slurm unreachable"
SUBMIT_TIMEOUT_S = 30.0  # sbatch (it retries a busy controller itself)
CACHE_S = 2.0  # one listing's answer serves the reconcile that follows it
TIME_GRACE_S = 120  # a job's time limit over its turn's --timeout: setup, snapshots, recording
# what the job gets from the environment besides [slurm] env (names only; values via sbatch)
BASE_EXPORT = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",  # zwarm's trust file
    "XDG_STATE_HOME",  # launch pins
    "XDG_DATA_HOME",  # worktrees
    "XDG_CACHE_HOME",
)
# job states after which nothing of the job runs (squeue %T, sacct State's first word)
ENDED = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
# filesystems no other machine sees: a state dir there cannot serve other nodes
LOCAL_ONLY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs", "overlay", "squashfs"})


class Job(NamedTuple):
    """What Slurm says of one job; ``state`` "" when Slurm no longer knows it."""

    id: str
    state: str
    reason: str = ""
    node: str = ""
    exit: str = ""  # "code:signal" (sacct only)


class SlurmLauncher(Launcher):
    name: ClassVar[str] = "slurm"
    batched: ClassVar[bool] = True
    settings: ClassVar[Mapping[str, Setting]] = SETTINGS
    spawn_options: ClassVar[tuple[str, ...]] = ("partition", "qos", "time", "cpus", "mem")
    reasons: ClassVar[Mapping[str, Failure]] = REASONS

    def __init__(self, store: Store, env: Env) -> None:
        super().__init__(store, env)
        self._shared_checked = False

    # ------------------------------------------------------------------ starting
    def start(
        self,
        sid: str,
        turn: Turn,
        after: Sequence[Turn] = (),
        after_any: bool = False,
        settings: Mapping[str, Any] = NO_SETTINGS,
    ) -> None:
        table = {**{k: s.default for k, s in SETTINGS.items()}, **settings}
        root = os.path.realpath(self.store.root)
        self._check_shared(root, table)
        import shutil

        if shutil.which("sbatch", path=self.env.environ.get("PATH", os.defpath)) is None:
            raise OSError("sbatch not found on PATH (Slurm's client commands are needed here)")
        log = self.store.turn_path(sid, turn.n, "slurm.log")
        argv = sbatch_argv(table, self.env.environ, sid, turn, str(log), after, after_any)
        from zwarm.system.files import write_private

        write_private(log, b"")  # a new file of ours (a planted link is replaced, not followed)
        script = job_script(table["python"] or self.env.python, root, sid, turn.n)
        r = _run(argv, SUBMIT_TIMEOUT_S, script.encode(), submit_env(self.env.environ))
        if r is None:
            raise OSError(
                f"sbatch did not answer within {SUBMIT_TIMEOUT_S:g} s (slurm unreachable)"
            )
        job = r.stdout.decode("utf-8", "replace").strip().split(";", 1)[0]
        if r.returncode != 0 or not JOB_ID.match(job):
            raise OSError(f"sbatch failed: {_said(r.stderr) or f'exit {r.returncode}'}")
        from zwarm.errors import StoreError
        from zwarm.store import pins

        try:  # what kill may cancel: recorded where the agent cannot write
            pins.record_handle(self.env.environ, sid, Path(root), turn.n, {"job": job})
        except StoreError as e:
            _run(["scancel", job], QUERY_TIMEOUT_S)  # just submitted: ours, not yet started
            raise OSError(f"{e}; slurm job {job} cancelled") from None
        turn.launcher = self.name
        turn.handle = {"job": job}

    def _check_shared(self, root: str, table: Mapping[str, Any]) -> None:
        """Refuse a state dir other nodes cannot see (once per process)."""
        if self._shared_checked:
            return
        kind = fs_type(root)
        if kind in LOCAL_ONLY_FS:
            others = other_nodes(table["partition"])
            if others:
                raise OSError(
                    f"the state dir {root} is on {kind}, which Slurm's other nodes "
                    f"({', '.join(others[:3])}) cannot see: put it on a filesystem the nodes "
                    "share, at the same path (docs/slurm.md)"
                )
        self._shared_checked = True

    def can_wait_for(self, turns: Sequence[Turn]) -> bool:
        return bool(turns) and all(
            t.launcher == self.name and job_of(t) is not None and not t.status.finished
            for t in turns
        )

    def runs_here(self, sid: str, turn: Turn) -> bool:
        job = self._recorded(sid, turn.n)
        return (
            job is not None and job == job_of(turn) and self.env.environ.get("SLURM_JOB_ID") == job
        )

    def _recorded(self, sid: str, n: int) -> str | None:
        """The job zwarm recorded submitting for turn ``n`` of ``sid`` (``store.pins``)."""
        from zwarm.store import pins

        got = pins.handle(self.env.environ, sid, Path(os.path.realpath(self.store.root)), n)
        job = (got or {}).get("job")
        return job if job is not None and JOB_ID.match(job) else None

    # ------------------------------------------------------------------ watching
    def alive(self, sid: str, turn: Turn) -> bool:
        return self.survey([(sid, turn)])[sid].alive

    def _watched(self, sid: str, turn: Turn) -> str | None:
        """The job whose state is the turn's: the one zwarm recorded submitting for it, else
        (a turn started before such records were kept) the one ``meta.json`` names; never a
        job the agent named instead of its own (it would keep a finished turn "running")."""
        return self._recorded(sid, turn.n) or job_of(turn)

    def survey(self, items: Sequence[tuple[str, Turn]]) -> dict[str, Probe]:
        jobs = {sid: self._watched(sid, t) for sid, t in items}
        known = jobs_state([j for j in jobs.values() if j is not None])
        out: dict[str, Probe] = {}
        for sid, _ in items:
            job = jobs[sid]
            out[sid] = probe(known.get(job) if job else Job("", ""), job is not None)
        return out

    def lost(self, sid: str, turn: Turn) -> tuple[str, str]:
        job = self._watched(sid, turn)
        if job is None:
            from zwarm.model import Reason

            return Reason.SUPERVISOR_LOST, "no valid slurm job id recorded for the turn"
        found = jobs_state([job]).get(job)  # the answer ``alive`` just had (CACHE_S)
        log = self.store.turn_path(sid, turn.n, "slurm.log")
        if found is None:
            from zwarm.model import Reason

            why = f"slurm job {job} ended without recording the turn (Slurm unreachable since)"
            return Reason.SUPERVISOR_LOST, why
        return lost_reason(found, str(log))

    # ------------------------------------------------------------------ stopping
    def stop(self, sid: str, turn: Turn) -> None:
        """Cancel the job zwarm submitted for ``turn``, verified (``cancel``); a job that
        ``meta.json`` names instead is left alone, and said."""
        from zwarm.errors import SessionStateError

        claimed = job_of(turn)  # meta.json's word: untrusted, never signalled
        job = self._recorded(sid, turn.n)
        if job is None:
            if claimed is None:
                return  # nothing was submitted
            raise SessionStateError(
                f"session {sid} is recorded killed, but zwarm has no record of submitting "
                f"slurm job {claimed}, which its meta.json names for turn {turn.n}: not "
                f"cancelled (if that job is this session's, run `scancel {claimed}`)"
            )
        try:
            cancel(sid, turn.n, job)
        finally:
            _forget(job)
        if claimed is not None and claimed != job:
            raise SessionStateError(
                f"session {sid} is killed (its slurm job {job} cancelled), but its meta.json "
                f"named slurm job {claimed} for turn {turn.n}, which zwarm did not submit for "
                "it: that job was left alone (meta.json was rewritten outside zwarm)"
            )


# ---------------------------------------------------------------------- the job
def job_name(sid: str, n: int) -> str:
    """The name of turn ``n``'s job: what ``stop`` checks before it cancels one."""
    return f"zwarm-{sid}-{n}"


def cancel(sid: str, n: int, job: str) -> None:
    """Cancel ``job`` if Slurm reports it as turn ``n`` of ``sid`` (named ``job_name``,
    owned by this user; the name is also ``scancel``'s filter, so a job that changed
    meanwhile is not touched). One already ended or forgotten needs nothing. Raises
    ``SessionStateError`` for a job that is not the session's, or when Slurm did not cancel."""
    from zwarm.errors import SessionStateError

    want = job_name(sid, n)
    fmt = "--format=%i|%T|%j|%U"
    r = _run(["squeue", "--noheader", "--states=all", f"--jobs={job}", fmt], QUERY_TIMEOUT_S)
    if r is not None and r.returncode != 0 and b"Invalid job id" in r.stderr:
        return  # Slurm no longer knows it: it ended long ago
    if r is not None and r.returncode == 0:
        rows = [ln.split("|") for ln in r.stdout.decode("utf-8", "replace").splitlines()]
        found = [p for p in rows if len(p) >= 4 and p[0].strip() == job]
        if not found:
            return
        p = found[0]  # a name may hold "|": the id and state lead, the user ends
        state, name, uid = _word(p[1]), _word("|".join(p[2:-1])), _word(p[-1])
        if name != want or uid != str(os.getuid()):
            raise SessionStateError(
                f"session {sid} is recorded killed, but Slurm reports job {job} as not its "
                f"own (named {name!r}, user {uid}; turn {n}'s job is named {want!r}, user "
                f"{os.getuid()}): not cancelled"
            )
        if state.upper() in ENDED:
            return
        r = _run(["scancel", f"--name={want}", job], QUERY_TIMEOUT_S)
    if r is None or r.returncode != 0:
        why = "no answer" if r is None else _said(r.stderr) or f"exit {r.returncode}"
        raise SessionStateError(
            f"session {sid} is recorded killed, but Slurm did not cancel job {job} "
            f"({why}): run `scancel {job}`"
        )


def job_of(turn: Turn) -> str | None:
    """The turn's job id, if its handle holds a valid one."""
    job = (turn.handle or {}).get("job")
    return job if job is not None and JOB_ID.match(job) else None


def sbatch_argv(
    table: Mapping[str, Any],
    environ: Mapping[str, str],
    sid: str,
    turn: Turn,
    log: str,
    after: Sequence[Turn] = (),
    after_any: bool = False,
) -> list[str]:
    """``sbatch``'s argv for ``turn``: ``[slurm] extra_args`` first, then the settings, then
    what zwarm needs (later options win). Names only in ``--export``."""
    if "%" in log or "\\" in log:
        raise OSError(
            f"the state dir's path {log!r} has '%' or '\\', which sbatch reads as patterns"
        )
    argv = ["sbatch", *table["extra_args"]]
    for key, opt in (("partition", "partition"), ("account", "account"), ("qos", "qos")):
        if table[key]:
            argv.append(f"--{opt}={table[key]}")
    minutes = job_minutes(turn.timeout, table["time"])
    if minutes is not None:
        argv.append(f"--time={minutes}")
    if table["cpus"]:
        argv.append(f"--cpus-per-task={table['cpus']}")
    if table["mem"]:
        argv.append(f"--mem={table['mem']}")
    if after:
        kind = "afterany" if after_any else "afterok"
        argv.append(f"--dependency={kind}:" + ":".join(job_of(t) or "" for t in after))
        argv.append("--kill-on-invalid-dep=yes")
    names = [n for n in dict.fromkeys([*BASE_EXPORT, *table["env"]]) if n in environ]
    exports = [n for n in names if not n.startswith("ZWARM_")]
    argv += [
        "--parsable",
        f"--job-name={job_name(sid, turn.n)}",
        "--chdir=/",
        f"--output={log}",
        "--open-mode=append",
        "--no-requeue",  # preempted or its node lost: reconciled, never run twice
        "--export=" + ",".join([*exports, f"ZWARM_SUPERVISOR_OF={sid}"]),
    ]
    return argv


def job_script(python: str, state_dir: str, sid: str, n: int) -> str:
    """The batch script: zwarm's own values only, shell-quoted; no prompt, no variable."""
    import shlex

    from zwarm.env.python import python_argv

    cmd = python_argv(python, "zwarm.runtime.supervisor", "--turn", str(n), state_dir, sid)
    return (
        "#!/bin/sh\n"
        f"# zwarm: turn {n} of session {sid} (its prompt is in the session's files)\n"
        f"exec {shlex.join(cmd)}\n"
    )


def submit_env(environ: Mapping[str, str]) -> dict[str, str]:
    """sbatch's own environment: the caller's, without a surrounding job's ``SLURM_*``
    (a turn submitted from a compute node is a job of its own) or zwarm's markers."""
    drop = ("ZWARM_SESSION_ID", "ZWARM_SUPERVISOR_OF")
    return {
        k: v
        for k, v in environ.items()
        if k not in drop and (not k.startswith("SLURM_") or k == "SLURM_CONF")
    }


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\Z")


def time_seconds(text: str) -> int | None:
    """Seconds in a Slurm time (``minutes``, ``m:s``, ``h:m:s``, ``d-h``, ``d-h:m``,
    ``d-h:m:s``); None for none ("", UNLIMITED, INFINITE) or a malformed one."""
    m = _TIME.match(text.strip())
    if m is None:
        return None
    days, a, b, c = m.groups()
    if days is not None:
        return ((int(days) * 24 + int(a)) * 60 + int(b or 0)) * 60 + int(c or 0)
    if c is not None:
        return (int(a) * 60 + int(b)) * 60 + int(c)
    if b is not None:
        return int(a) * 60 + int(b)
    return int(a) * 60


def job_minutes(timeout: float | None, configured: str) -> int | None:
    """The job's time limit in minutes (Slurm's unit): the turn's ``--timeout`` plus
    ``TIME_GRACE_S``, or ``[slurm] time``, the smaller if both; None: the partition's."""
    limits = []
    if timeout:
        limits.append(timeout + TIME_GRACE_S)
    seconds = time_seconds(configured) if configured else None
    if seconds:
        limits.append(seconds)
    return max(1, math.ceil(min(limits) / 60)) if limits else None


# ---------------------------------------------------------------------- asking Slurm
_cache: dict[str, tuple[float, Job | None]] = {}  # job -> (when, what; None: unreachable)


def jobs_state(jobs: Sequence[str]) -> dict[str, Job | None]:
    """What Slurm says of each job (None: Slurm did not answer): one ``squeue`` for all of
    them, ``sacct`` for those it no longer knows; answers kept for ``CACHE_S``."""
    now = time.monotonic()
    out: dict[str, Job | None] = {}
    ask = []
    for job in dict.fromkeys(jobs):
        hit = _cache.get(job)
        if hit is not None and now - hit[0] < CACHE_S:
            out[job] = hit[1]
        else:
            ask.append(job)
    if ask:
        got = _query(ask)
        done = time.monotonic()  # an answer that took long is still fresh for CACHE_S
        for job in ask:
            out[job] = None if got is None else got.get(job, Job(job, ""))
            _cache[job] = (done, out[job])
    return out


def _forget(job: str) -> None:
    _cache.pop(job, None)


def _query(jobs: list[str]) -> dict[str, Job] | None:
    fmt = "--format=%i|%T|%r|%N"
    argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(jobs)}", fmt]
    r = _run(argv, QUERY_TIMEOUT_S)
    if r is None:
        return None
    if r.returncode != 0:
        if len(jobs) == 1 and b"Invalid job id" in r.stderr:
            return _accounted(jobs)  # squeue's answer for one job it no longer knows
        return None
    found = parse_squeue(r.stdout.decode("utf-8", "replace"))
    missing = [j for j in jobs if j not in found]
    return {**found, **(_accounted(missing) if missing else {})}


def parse_squeue(text: str) -> dict[str, Job]:
    """``squeue --format=%i|%T|%r|%N`` lines, by job id (malformed lines skipped)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and JOB_ID.match(parts[0]):
            job, state, reason, node = parts
            out[job] = Job(job, state.strip().upper()[:40], _word(reason), _word(node))
    return out


def _accounted(jobs: list[str]) -> dict[str, Job]:
    """What ``sacct`` recorded of jobs squeue no longer knows (none without accounting)."""
    fmt = "--format=JobIDRaw,State,ExitCode,NodeList"
    argv = ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={','.join(jobs)}", fmt]
    r = _run(argv, QUERY_TIMEOUT_S)
    if r is None or r.returncode != 0:
        return {}
    return parse_sacct(r.stdout.decode("utf-8", "replace"))


def parse_sacct(text: str) -> dict[str, Job]:
    """``sacct --parsable2 --format=JobIDRaw,State,ExitCode,NodeList`` lines, by job id."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and JOB_ID.match(parts[0]):
            job, state, code, node = parts
            word = state.strip().split(" ", 1)[0].upper()[:40]  # "CANCELLED by 1000"
            out[job] = Job(job, word, "", _word(node), _word(code))
    return out


def _word(text: str) -> str:
    """A short, printable field of Slurm's output, compared as it is (a job's name and user
    before a cancel): no escape is interpreted, no marker added (not a cutter for display)."""
    return "".join(c for c in text.strip() if c.isprintable())[:200]


def probe(job: Job | None, recorded: bool) -> Probe:
    """A turn's ``Probe`` from what Slurm said of its job (None: Slurm unreachable)."""
    if not recorded:
        return Probe(False, detail="no slurm job recorded")
    if job is None:
        return Probe(True, shown="unknown", detail="slurm unreachable")
    if job.state == "":
        return Probe(False, detail=f"slurm no longer knows job {job.id}")
    if job.state in ENDED:
        return Probe(False, detail=f"slurm: {job.state}", state=job.state)
    if job.state == "PENDING":  # its reason: Resources, Priority, Dependency, BeginTime...
        why = f"slurm: {job.reason}" if job.reason not in ("", "None") else "slurm"
        return Probe(True, shown="queued", detail=why, state="PENDING")
    where = f" on {job.node}" if job.node else ""
    return Probe(True, detail=f"slurm job {job.id}{where}", state=job.state)


_LOST = {  # job state -> (reason, what happened)
    "TIMEOUT": (TIMEOUT, "reached its Slurm time limit"),
    "DEADLINE": (TIMEOUT, "reached its Slurm deadline"),
    "NODE_FAIL": (NODE_FAIL, "lost its node (node failure)"),
    "BOOT_FAIL": (NODE_FAIL, "never ran: its node failed to boot"),
    "PREEMPTED": (PREEMPTED, "was preempted by Slurm"),
    "CANCELLED": (CANCELLED, "was cancelled outside zwarm (scancel)"),
}


def lost_reason(job: Job, log: str) -> tuple[str, str]:
    """The reason and message of a turn whose job ended unrecorded."""
    from zwarm.model import Reason

    if job.state == "":
        why = f"slurm job {job.id} ended without recording the turn (Slurm no longer knows it)"
        return Reason.SUPERVISOR_LOST, why
    if job.state == "CANCELLED" and job.reason == "DependencyNeverSatisfied":
        why = (
            f"dependency failed: slurm job {job.id} never started, a job it runs after did "
            "not complete (CANCELLED, DependencyNeverSatisfied)"
        )
        return Reason.DEPENDENCY_FAILED, why
    state = job.state + (f", {job.reason}" if job.reason and job.reason != "None" else "")
    if job.state in _LOST:
        reason, what = _LOST[job.state]
        return reason, f"slurm job {job.id} {what} ({state})"
    code = f", exit {job.exit}" if job.exit else ""
    why = (
        f"slurm job {job.id} ended ({state}{code}) without its supervisor recording the "
        f"turn; its output: {log} (the state dir must be at the same path on the nodes, "
        "and [slurm] python must have zwarm there)"
    )
    return Reason.SUPERVISOR_LOST, why


# ---------------------------------------------------------------------- the cluster
def fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The filesystem type of the mount holding ``path`` (None if unknown)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 22).splitlines()
    except OSError:
        return None
    best, kind = -1, None
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        point = _unescape(fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), tail.split()[0]
    return kind


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def other_nodes(partition: str) -> list[str]:
    """The partition's nodes other than this machine (none if sinfo does not answer)."""
    argv = ["sinfo", "--noheader", "--format=%n"]
    if partition:
        argv.append(f"--partition={partition}")
    r = _run(argv, QUERY_TIMEOUT_S)
    if r is None or r.returncode != 0:
        return []
    import socket

    me = {socket.gethostname(), socket.gethostname().split(".", 1)[0], "localhost"}
    nodes = {_word(n) for n in r.stdout.decode("utf-8", "replace").split()}
    return sorted(n for n in nodes if n and n not in me)


def _run(
    argv: list[str],
    timeout: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes] | None:
    """Run a Slurm command; None if it is missing or did not finish within ``timeout``."""
    import subprocess

    try:
        return subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd="/",
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _said(data: bytes) -> str:
    """What a Slurm command wrote on stderr, on one line (its last three lines)."""
    from zwarm.text import oneline

    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return oneline("; ".join(lines[-3:]), 400)
