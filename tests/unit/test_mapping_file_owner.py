"""A mapping edit keeps the file's owner, group and mode, so relays running as another user still read it.

Before: the CLI replaced the file with a temp file's mode 0600, owned by whoever edited it; a relay running
as its own user (uid 10001 in the image, ``canal-relay`` under systemd) then could not read it, hot reload
kept the old version silently and the next restart failed. Here the file belongs to ``nobody`` (the
relay's user), an operator edits it as root with the CLI, and a reader running as ``nobody`` — a forked
child that dropped to that user, using the relay's own loader — reads the new version and every history
record. Needs root (to own files as another user and to drop to it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mapping.load import load_mapping
from mapping.store import FileMappingStore
from relay.cli.main import main

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: files owned by another user")

MAPPING = """\
# the shop's mapping, written by hand
version: 1
logical_dbs:
  shop:
    physical: ['shop_\\d+']        # every shard
    tables:
      orders: {physical: ['orders_\\d+'], key_shard: physical}
"""


def _as_user(name: str, work: Callable[[], int]) -> int:
    """Run ``work`` in a forked child that became user ``name`` (and its group); its exit status."""
    user = pwd.getpwnam(name)
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, do the work, never return into pytest
        code = 70
        try:
            os.setgroups([user.pw_gid])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            code = work()
        except BaseException:
            code = 71
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.fixture
def relay_user() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder the relay's user can reach (pytest's own tmp folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="relay-owner-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _install(tmp_path: Path, user: pwd.struct_passwd, mode: int, owner: str) -> tuple[Path, Path]:
    """A config folder readable by all, the mapping owned by ``owner`` (user or group) with ``mode``, and
    the relay's state directory owned by the relay's user. Returns (mapping file, state directory)."""
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    state.mkdir()
    tmp_path.chmod(0o755)
    os.chown(state, user.pw_uid, user.pw_gid)
    path = etc / "mapping.yaml"
    path.write_text(MAPPING)
    uid, gid = (user.pw_uid, user.pw_gid) if owner == "user" else (0, user.pw_gid)
    os.chown(path, uid, gid)
    path.chmod(mode)
    return path, state


@pytest.mark.parametrize(("mode", "owner"), [(0o644, "user"), (0o640, "group")])
def test_an_edit_by_root_leaves_the_file_readable_by_the_relays_user(
    tmp_path: Path,
    relay_user: pwd.struct_passwd,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: int,
    owner: str,
) -> None:
    path, state = _install(tmp_path, relay_user, mode, owner)
    before = path.stat()
    monkeypatch.setenv("RELAY_STATE_DIR", str(state))
    code = main(["mapping", "tag", "set", "shop.orders", "hot", "-f", str(path), "--note", "as root"])
    assert code == 0, capsys.readouterr().err

    after = path.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_uid,
        before.st_gid,
        stat.S_IMODE(before.st_mode),
    )
    assert after.st_ino != before.st_ino  # replaced atomically, not rewritten in place
    text = path.read_text()
    assert "# the shop's mapping, written by hand" in text and "# every shard" in text
    assert "tag: hot" in text and "version: 2" in text

    history = state / "mapping-history"
    assert history.stat().st_uid == relay_user.pw_uid  # the relay can keep versions there too

    def read_as_relay() -> int:
        mapping = load_mapping(path)
        store = FileMappingStore(path, history)
        ok = mapping.version == 2 and store.version(1).version == 1 and store.version(2) == mapping
        return 0 if ok else 1

    assert _as_user(relay_user.pw_name, read_as_relay) == 0


def test_an_edit_that_cannot_keep_the_owner_is_refused_and_stores_nothing(
    tmp_path: Path, relay_user: pwd.struct_passwd, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A folder anyone may write (so the rename itself would work) and a file owned by root: an edit by
    # another user would hand the file over to that user.
    path, state = _install(tmp_path, relay_user, 0o644, "root")
    os.chown(path, 0, 0)
    path.parent.chmod(0o777)
    monkeypatch.setenv("RELAY_STATE_DIR", str(state))
    before = path.read_bytes()
    err = tmp_path / "err.txt"
    err.touch(mode=0o666)
    err.chmod(0o666)

    def edit_as_relay() -> int:
        with open(err, "w") as sink:
            sys.stderr = sink  # the child's own stderr (pytest captures the parent's)
            return main(["mapping", "tag", "set", "shop.orders", "hot", "-f", str(path)])

    code = _as_user(relay_user.pw_name, edit_as_relay)
    message = err.read_text()
    assert code == 2, message
    assert "cannot keep that owner and group" in message and "Nothing was stored" in message
    assert message.count("\n") == 1
    assert path.read_bytes() == before and path.stat().st_uid == 0
    assert not (state / "mapping-history" / "00000002.yaml").exists()


def test_a_linked_mapping_file_stays_a_link_to_the_edited_file(
    tmp_path: Path, relay_user: pwd.struct_passwd, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, state = _install(tmp_path, relay_user, 0o644, "user")
    link = tmp_path / "etc" / "current.yaml"
    link.symlink_to(path.name)
    monkeypatch.setenv("RELAY_STATE_DIR", str(state))
    assert main(["mapping", "tag", "set", "shop.orders", "hot", "-f", str(link)]) == 0
    assert link.is_symlink() and "tag: hot" in path.read_text()
    assert path.stat().st_uid == relay_user.pw_uid
