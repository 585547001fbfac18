"""A host's answer about a session's worktree (``model.hostws``) is untrusted input: only what
its types allow is read, its size is capped, anything else is refused in one line."""

from __future__ import annotations

import json

import pytest

from zwarm.model.hostws import ANSWER_BYTES, decode_answer

SHA = "a" * 40
GOOD = {"mode": "worktree", "repo": "/srv/r", "tree": "/home/u/w/r-1/x", "branch": "zwarm/x",
        "base": SHA}  # fmt: skip


def test_a_well_formed_answer_is_read() -> None:
    got = decode_answer(json.dumps({"workspace": GOOD, "cwd": GOOD["tree"]}).encode())
    assert got.workspace is not None and got.workspace.branch == "zwarm/x" and got.error is None


@pytest.mark.parametrize(
    "bad",
    [
        {"workspace": {**GOOD, "tree": "relative/x"}},  # a path not absolute
        {"workspace": {**GOOD, "base": "HEAD"}},  # not a commit id
        {"workspace": {**GOOD, "branch": "-x"}},  # not a branch name
        {"workspace": {**GOOD, "host": "Not A Host"}},
        {
            "merge": {
                "branch": "b",
                "into": "m",
                "worktree": "/r",
                "squash": False,
                "merged": True,
                "commit": "zz",
            }
        },
        {"error": "x" * 5000},
        [],
    ],
)
def test_a_malformed_answer_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError) as e:
        decode_answer(json.dumps(bad).encode())
    assert "\n" not in str(e.value) and str(e.value).startswith("not a valid answer")


def test_an_answer_too_large_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(ValueError, match="larger than"):
        decode_answer(b" " * (ANSWER_BYTES + 1))
