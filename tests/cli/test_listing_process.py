"""A listing in zwarm's own process runs without the cyclic garbage collector (``output.one_shot``):
its collections over thousands of rows cost it ~5%. A program that calls ``main`` keeps its
collector. (``ls --watch``, which runs as long as the user looks, keeps it too: not tested
here, it never ends by itself.)"""

from __future__ import annotations

import pytest

from tests.support import ZW

# Runs ``entry`` (``run``: the console script; ``main``: a program's call) with ``exit_now``
# replaced by a report of whether the collector is on as the listing ends (``main``: reported
# as its SystemExit is caught).
PROBE = """
import gc, os, sys
import zwarm.cli as cli
import zwarm.cli.output as output
def report(code=0):
    sys.stdout.flush()
    os.write(2, b"gc-enabled=%d\\n" % gc.isenabled())
    os._exit(0)
output.exit_now = report
sys.argv = ["zwarm", *sys.argv[2:]]
try:
    getattr(cli, ENTRY)()
except SystemExit:  # main: a program's call ends by SystemExit, not by exit_now
    report()
"""


def _probe(zw: ZW, entry: str, *args: str) -> str:
    res = zw.python(PROBE.replace("ENTRY", repr(entry)), "-", *args, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [("ls", "--json"), ("ls",)])
def test_a_listing_process_collects_no_garbage_cycles(zw: ZW, args: tuple[str, ...]) -> None:
    zw.spawn("t")
    assert _probe(zw, "run", *args) == "gc-enabled=0"


def test_a_program_calling_main_keeps_its_collector(zw: ZW) -> None:
    zw.spawn("t")
    assert _probe(zw, "main", "ls", "--json") == "gc-enabled=1"
