"""The slurm launcher's pure parts, without a cluster: sbatch's argv and job script, time
limits, what squeue/sacct say and what a job's end means for its turn, the shared-filesystem
check, the config table, and how ``ls`` shows a job waiting in Slurm's queue. The real
cluster is in tests/launchers/slurm/."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from zwarm import config
from zwarm.cli.render import launcher_status
from zwarm.errors import ConfigError
from zwarm.launchers import slurm
from zwarm.launchers.base import Probe
from zwarm.model import Reason, Status, Turn

SID = "0b9d3f52-1c1e-4c55-9a52-6f7e2b7f0a11"
TABLE: dict[str, Any] = {**config.defaults().data["slurm"]}


def turn(n: int = 1, timeout: float | None = None, job: str | None = "42") -> Turn:
    t = Turn(n, Status.RUNNING, "the prompt text", "task", "2026-01-01T00:00:00+00:00")
    t.timeout, t.launcher = timeout, "slurm"
    t.handle = {"job": job} if job is not None else None
    return t


def test_sbatch_argv_carries_names_never_values_nor_the_prompt() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "OPENAI_API_KEY": "sk-secret", "ZWARM_DIR": "/x"}
    table = {**TABLE, "env": ["OPENAI_API_KEY", "MISSING", "ZWARM_DIR"], "partition": "gpu"}
    argv = slurm.sbatch_argv(table, environ, SID, turn(2), "/s/turns/turn_2.slurm.log")
    text = "\0".join(argv)
    assert "sk-secret" not in text and "the prompt text" not in text
    export = next(a for a in argv if a.startswith("--export="))
    assert export == f"--export=PATH,HOME,OPENAI_API_KEY,ZWARM_SUPERVISOR_OF={SID}"
    assert argv[0] == "sbatch" and "--parsable" in argv and "--no-requeue" in argv
    assert "--partition=gpu" in argv and f"--job-name=zwarm-{SID}-2" in argv
    assert "--output=/s/turns/turn_2.slurm.log" in argv


def test_extra_args_come_first_so_zwarm_options_win() -> None:
    table = {**TABLE, "extra_args": ["--export=ALL", "--constraint=a100"]}
    argv = slurm.sbatch_argv(table, {"PATH": "/bin"}, SID, turn(), "/log")
    assert argv[1:3] == ["--export=ALL", "--constraint=a100"]
    assert argv[-1].startswith("--export=PATH,")  # the last --export is the one sbatch uses


def test_dependency_on_other_turns_jobs() -> None:
    deps = [turn(job="7"), turn(job="9")]
    argv = slurm.sbatch_argv(TABLE, {}, SID, turn(), "/log", deps)
    assert "--dependency=afterok:7:9" in argv and "--kill-on-invalid-dep=yes" in argv
    argv = slurm.sbatch_argv(TABLE, {}, SID, turn(), "/log", deps, after_any=True)
    assert "--dependency=afterany:7:9" in argv


def test_a_log_path_slurm_would_read_as_a_pattern_is_refused() -> None:
    with pytest.raises(OSError, match="patterns"):
        slurm.sbatch_argv(TABLE, {}, SID, turn(), "/state%j/turns/turn_1.slurm.log")


@pytest.mark.subprocess
def test_job_script_holds_only_zwarm_values_quoted() -> None:
    script = slurm.job_script("/opt/py env/bin/python", "/shared/it's/.zwarm", SID, 3)
    assert script.startswith("#!/bin/sh\n")
    exec_line = script.splitlines()[-1]
    assert exec_line.startswith("exec '/opt/py env/bin/python' -I -m zwarm.runtime.supervisor")
    assert "--turn 3" in exec_line and SID in exec_line
    assert subprocess.run(["sh", "-n", "-c", exec_line], check=False).returncode == 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("1:30", 90),
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-2:30", 95400),
        ("1-00:00:10", 86410),
        ("UNLIMITED", None),
        ("", None),
        ("1h", None),
    ],
)
def test_slurm_times(text: str, seconds: int | None) -> None:
    assert slurm.time_seconds(text) == seconds


def test_job_time_limit_from_timeout_and_config() -> None:
    assert slurm.job_minutes(None, "") is None
    assert slurm.job_minutes(600, "") == 12  # 10 min + 2 min to record the turn
    assert slurm.job_minutes(600, "5") == 5  # the smaller
    assert slurm.job_minutes(None, "0:10") == 1  # Slurm's unit is a minute
    argv = slurm.sbatch_argv(TABLE, {}, SID, turn(timeout=3600), "/log")
    assert "--time=62" in argv


def test_job_ids_from_meta_are_checked() -> None:
    assert slurm.job_of(turn(job="123")) == "123"
    for bad in ("-1", "12;rm", "0", "", "1 2", "--help", "9" * 13):
        assert slurm.job_of(turn(job=bad)) is None
    assert slurm.job_of(turn(job=None)) is None


def test_parse_squeue_and_sacct() -> None:
    text = "12|PENDING|Resources|\n13|RUNNING|None|node7\nbad line\n-1|RUNNING|x|y\n"
    got = slurm.parse_squeue(text)
    assert set(got) == {"12", "13"}
    assert got["12"].state == "PENDING" and got["12"].reason == "Resources"
    assert got["13"].node == "node7"
    acct = slurm.parse_sacct("14|CANCELLED by 1000|0:15|node2\n15|TIMEOUT|0:0|node1\n")
    assert acct["14"].state == "CANCELLED" and acct["14"].exit == "0:15"
    assert acct["15"].state == "TIMEOUT"


def test_probes_from_job_states() -> None:
    assert slurm.probe(None, True) == Probe(True, "unknown", "slurm unreachable")
    pending = slurm.probe(slurm.Job("1", "PENDING", "Resources"), True)
    assert pending.alive and pending.shown == "queued" and pending.detail == "slurm: Resources"
    assert slurm.probe(slurm.Job("1", "PENDING", "None"), True).detail == "slurm"
    running = slurm.probe(slurm.Job("1", "RUNNING", "None", "n1"), True)
    assert running.alive and running.shown is None and running.detail == "slurm job 1 on n1"
    assert slurm.probe(slurm.Job("1", "COMPLETING"), True).alive  # still being killed
    assert not slurm.probe(slurm.Job("1", "TIMEOUT"), True).alive
    assert not slurm.probe(slurm.Job("1", ""), True).alive  # Slurm forgot it: it ended
    assert not slurm.probe(None, False).alive  # no valid job recorded


@pytest.mark.parametrize(
    ("state", "reason", "want"),
    [
        ("TIMEOUT", "TimeLimit", slurm.TIMEOUT),
        ("NODE_FAIL", "None", slurm.NODE_FAIL),
        ("BOOT_FAIL", "None", slurm.NODE_FAIL),
        ("PREEMPTED", "None", slurm.PREEMPTED),
        ("CANCELLED", "None", slurm.CANCELLED),
        ("CANCELLED", "DependencyNeverSatisfied", Reason.DEPENDENCY_FAILED),
        ("FAILED", "NonZeroExitCode", Reason.SUPERVISOR_LOST),
        ("OUT_OF_MEMORY", "None", Reason.SUPERVISOR_LOST),
        ("", "", Reason.SUPERVISOR_LOST),
    ],
)
def test_what_a_jobs_end_means(state: str, reason: str, want: str) -> None:
    got, why = slurm.lost_reason(slurm.Job("77", state, reason), "/s/turn_1.slurm.log")
    assert got == want
    assert "77" in why and (state in why or not state)


def test_a_failed_job_points_at_its_output_and_the_shared_filesystem() -> None:
    _, why = slurm.lost_reason(slurm.Job("5", "FAILED", exit="127:0"), "/s/t/turn_1.slurm.log")
    assert "/s/t/turn_1.slurm.log" in why and "same path" in why and "127:0" in why


def test_fs_type_of_a_path(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "30 22 0:5 / /dev/shm rw - tmpfs tmpfs rw\n"
        "31 22 0:6 / /shared\\040space rw shared:1 - nfs4 srv:/x rw\n"
    )
    assert slurm.fs_type("/home/u/.zwarm", str(info)) == "ext4"
    assert slurm.fs_type("/dev/shm/z/.zwarm", str(info)) == "tmpfs"
    assert slurm.fs_type("/shared space/p/.zwarm", str(info)) == "nfs4"
    assert slurm.fs_type("/x", str(tmp_path / "none")) is None


def test_a_state_dir_other_nodes_cannot_see_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zwarm.env import Env
    from zwarm.store import Store

    launcher = slurm.SlurmLauncher(Store(tmp_path), Env(environ={}))
    monkeypatch.setattr(slurm, "fs_type", lambda path: "tmpfs")
    monkeypatch.setattr(slurm, "other_nodes", lambda partition: ["node1", "node2"])
    with pytest.raises(OSError, match=r"on tmpfs, which Slurm's other nodes \(node1, node2"):
        launcher._check_shared(str(tmp_path), TABLE)
    monkeypatch.setattr(slurm, "other_nodes", lambda partition: [])  # one node: fine
    launcher._check_shared(str(tmp_path), TABLE)


def test_an_unreachable_controller_is_asked_once_per_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], *a: Any, **k: Any) -> None:
        calls.append(argv)
        return None  # timed out

    monkeypatch.setattr(slurm, "_run", run)
    slurm._cache.clear()
    got = slurm.jobs_state(["901", "902", "903"])
    assert got == {"901": None, "902": None, "903": None}
    assert len(calls) == 1 and calls[0][0] == "squeue"
    slurm.jobs_state(["901"])  # the reconcile right after: answered from the same query
    assert len(calls) == 1
    slurm._cache.clear()


def test_slurm_config_table_is_checked() -> None:
    good = {"slurm": {"time": "1-00:00:00", "mem": "4G", "env": ["OPENAI_API_KEY"]}}
    assert config.validate(good, "c.toml")["slurm"]["mem"] == "4G"
    bad: list[dict[str, Any]] = [
        {"slurm": {"time": "1 hour"}},
        {"slurm": {"mem": "--wrap=rm"}},
        {"slurm": {"partition": "-p"}},
        {"slurm": {"env": ["NOT A NAME"]}},
        {"slurm": {"env": "OPENAI_API_KEY"}},
        {"slurm": {"python": "python3"}},
        {"slurm": {"cpus": -1}},
        {"slurm": {"extra_args": [1]}},
        {"launcher": {"default": "Slurm!"}},
    ]
    for doc in bad:
        with pytest.raises(ConfigError):
            config.validate(doc, "c.toml")


def test_launcher_keys_that_decide_what_runs_need_trust() -> None:
    for key in ("python", "extra_args", "env", "account"):
        assert config.is_security_key("slurm", key)
    assert config.is_security_key("launcher", "default")
    assert not config.is_security_key("slurm", "time")


def test_ls_shows_a_job_waiting_in_slurms_queue() -> None:
    def row(status: str, shown: str | None, detail: str | None) -> dict[str, Any]:
        return {"status": status, "shown_status": Probe(True, shown, detail).label()}

    assert launcher_status(row("running", "queued", "slurm: Resources")) == (
        "queued (slurm: Resources)"
    )
    assert launcher_status(row("running", "unknown", "slurm unreachable")) == (
        "unknown (slurm unreachable)"
    )
    assert launcher_status(row("running", None, "slurm job 4 on n1")) is None
    assert launcher_status(row("completed", "queued", "x")) is None
    assert launcher_status({"status": "running", "shown_status": None}) is None
    evil = launcher_status(row("running", "queued", "slurm: \x1b[2Jx\nnext"))
    assert evil is not None and "\x1b" not in evil and "\n" not in evil


def test_a_turns_job_is_recorded_beside_its_pin_and_read_back_strictly(tmp_path: Path) -> None:
    """The record ``kill`` trusts (``store.pins``): per turn, of this state dir only; a
    malformed or another state dir's record is none; ``rm`` removes it with the pin."""
    from zwarm.store import pins

    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    sdir, other = tmp_path / "a" / ".zwarm", tmp_path / "b" / ".zwarm"
    pins.record_handle(environ, SID, sdir, 1, {"job": "41"})
    pins.record_handle(environ, SID, sdir, 2, {"job": "42"})
    assert pins.handle(environ, SID, sdir, 1) == {"job": "41"}
    assert pins.handle(environ, SID, sdir, 2) == {"job": "42"}
    assert pins.handle(environ, SID, sdir, 3) is None
    assert pins.handle(environ, SID, other, 1) is None  # another state dir's session
    path = pins.pins_dir(environ) / f"{SID}.handles.json"
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text(json.dumps({"id": SID, "state_dir": str(sdir), "turns": {"1": 7}}))
    assert pins.handle(environ, SID, sdir, 1) is None  # malformed: no record
    pins.remove(environ, SID)
    assert not path.exists()
