"""The one flock helper family (``system.files.open_lock``/``take_lock``/``lock_fd``): every
lock zwarm takes opens its file without following a link, and waits as its caller asks."""

import os
from pathlib import Path

import pytest

from zwarm import trust
from zwarm.errors import TrustFileError
from zwarm.system.files import lock_fd, open_lock, take_lock

pytestmark = pytest.mark.unit


def test_take_lock_one_try_and_timeout(tmp_path: Path) -> None:
    held = lock_fd(tmp_path / "l")
    fd = open_lock(tmp_path / "l")  # another open file description: flock conflicts
    try:
        assert take_lock(fd, 0) is False
        calls: list[int] = []
        assert take_lock(fd, 0.2, lambda: calls.append(1), notice_after=0.05) is False
        assert calls == [1]  # said once
        os.close(held)
        assert take_lock(fd, 0) is True
    finally:
        os.close(fd)


def test_lock_file_is_never_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    os.symlink(target, tmp_path / "l")
    with pytest.raises(OSError):
        lock_fd(tmp_path / "l")
    assert not os.path.lexists(target)


def test_trust_lock_does_not_follow_a_link(tmp_path: Path) -> None:
    """The trust file's lock was opened without ``O_NOFOLLOW``: a dangling link in its
    place made zwarm create the file it pointed to."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "HOME": str(tmp_path)}
    path = trust.trust_file(env)
    path.parent.mkdir(parents=True, mode=0o700)
    target = tmp_path / "planted"
    os.symlink(target, path.with_name(path.name + ".lock"))
    with pytest.raises(TrustFileError, match="cannot lock"):
        trust.update(lambda data: None, env)
    assert not os.path.lexists(target)
