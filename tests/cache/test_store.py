"""The cache store: reuse, move aside (every byte kept), crash recovery, concurrency, refusals."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from rocmseat.atomic import LockTimeout, exclusive_lock
from rocmseat.cache.key import ConfigKey, digest_of
from rocmseat.cache.layout import MANIFEST_NAME
from rocmseat.cache.store import lock_path, prepare, read_manifest
from rocmseat.errors import ConfigError

NOW = dt.datetime(2026, 11, 29, 14, 0, 5, tzinfo=dt.UTC)
STAMP = "20261129T140005Z"

CTX = multiprocessing.get_context("fork")


def make_key(**factors: Any) -> ConfigKey:
    base: dict[str, Any] = {"key_schema": 1, "engine": {"vllm": "0.33.0"}, "speculative": {"k": 7}}
    base.update(factors)
    return ConfigKey(digest_of(base), base)


OLD = make_key()
NEW = make_key(speculative={"k": 5}, env={"RADIANCE_X": "1"})


def populate(directory: Path) -> dict[str, bytes]:
    """A cache tree the engine could have written: nested files, binary bytes, a symlink."""
    files = {
        "vllm/torch_compile_cache/abc123/rank_0_0/backbone/computation_graph.py": b"graph = 1\n",
        "vllm/torch_compile_cache/abc123/rank_0_0/inductor_cache/x.so": bytes(range(256)) * 40,
        "vllm/torch_compile_cache/abc123/rank_1_0/triton_cache/k.hsaco": os.urandom(3000),
        "miopen/db/gfx1201.ukdb": b"\x00\x01binary",
        "xdg-cache/empty": b"",
    }
    for rel, data in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (directory / "vllm" / "latest").symlink_to("torch_compile_cache/abc123")
    return files


def old_cache(root: Path, key: ConfigKey | None = OLD) -> dict[str, bytes]:
    live = root / "r0"
    live.mkdir(parents=True)
    files = populate(live)
    if key is not None:
        (live / MANIFEST_NAME).write_text(json.dumps({"key": key.digest, "factors": key.factors}))
        files[MANIFEST_NAME] = (live / MANIFEST_NAME).read_bytes()
    return files


def assert_kept(directory: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        assert (directory / rel).read_bytes() == data, rel
    assert os.readlink(directory / "vllm" / "latest") == "torch_compile_cache/abc123"
    stored = {
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and not p.is_symlink()
    }
    assert stored == set(files)


def stale_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if ".stale-" in p.name)


def test_fresh_then_reuse(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = prepare(root / "r0", NEW, seat_name="s", now=NOW)
    assert first.state_before == "absent" and first.moved_aside is None
    manifest = read_manifest(root / "r0")
    assert manifest is not None and manifest["key"] == NEW.digest
    assert manifest["factors"] == NEW.factors and manifest["created"] == "2026-11-29T14:00:05Z"
    assert manifest["rocmseat_version"] and manifest["replica"] == "r0" and manifest["seat"] == "s"
    assert first.env["VLLM_CACHE_ROOT"] == str(root / "r0" / "vllm")
    assert "TRITON_CACHE_DIR" not in first.env  # vLLM keeps a per-rank Triton cache itself
    for value in first.env.values():
        assert Path(value).is_dir() and Path(value).is_relative_to(root / "r0")
    (root / "r0" / "vllm" / "marker").write_text("x")
    again = prepare(root / "r0", NEW, now=NOW)
    assert again.reused and again.moved_aside is None and again.changed == ()
    assert (root / "r0" / "vllm" / "marker").read_text() == "x"
    assert stale_dirs(root) == []


def test_mismatch_moves_aside_every_byte(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "cache"
    files = old_cache(root)
    with caplog.at_level("WARNING", logger="rocmseat.cache"):
        result = prepare(root / "r0", NEW, now=NOW)
    assert result.state_before == "stale"
    assert result.moved_aside == root / f"r0.stale-{STAMP}"
    assert_kept(result.moved_aside, files)
    assert {c.factor for c in result.changed} == {"speculative.k", "env.RADIANCE_X"}
    assert [r.getMessage() for r in caplog.records] == [result.message]
    assert result.message == (
        f"r0: moved cache aside to {root}/r0.stale-{STAMP} because changed: "
        'env.RADIANCE_X: (absent) -> 1; speculative.k: 7 -> 5'
    )
    manifest = read_manifest(root / "r0")
    assert manifest is not None and manifest["key"] == NEW.digest
    assert manifest["replaced"] == {  # cache-audit reads why the old dir was moved from here
        "moved_to": f"r0.stale-{STAMP}",
        "why": "changed: env.RADIANCE_X: (absent) -> 1; speculative.k: 7 -> 5",
    }
    assert not any(p.name.startswith(".r0.") and p.name != ".r0.lock" for p in root.iterdir())


def test_unkeyed_cache_is_moved(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    files = old_cache(root, key=None)
    result = prepare(root / "r0", NEW, now=NOW)
    assert result.state_before == "unkeyed" and result.moved_aside is not None
    assert "no manifest" in result.message
    assert_kept(result.moved_aside, files)


def test_corrupt_manifest_is_unkeyed(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    old_cache(root, key=None)
    (root / "r0" / MANIFEST_NAME).write_text("{not json")
    result = prepare(root / "r0", NEW, now=NOW)
    assert result.state_before == "unkeyed"
    assert (result.moved_aside / MANIFEST_NAME).read_text() == "{not json"  # type: ignore[operator]


def test_stale_name_taken_gets_suffix(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    old_cache(root)
    (root / f"r0.stale-{STAMP}").mkdir()
    (root / f"r0.stale-{STAMP}-1").mkdir()
    result = prepare(root / "r0", NEW, now=NOW)
    assert result.moved_aside == root / f"r0.stale-{STAMP}-2"


def test_symlinked_root_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match=r"link is a symlink to .*real"):
        prepare(tmp_path / "link" / "r0", NEW)
    assert list((tmp_path / "real").iterdir()) == []


def test_symlinked_replica_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (tmp_path / "elsewhere").mkdir()
    root.mkdir()
    (root / "r0").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="r0 is a symlink"):
        prepare(root / "r0", NEW)


def test_foreign_owner_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    with pytest.raises(ConfigError, match=rf"owned by uid {os.geteuid()}, not by uid 4242"):
        prepare(root / "r0", NEW, owner_uid=4242)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_foreign_owner_real_chown(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    os.chown(root, 4242, 4242)
    with pytest.raises(ConfigError, match="owned by uid 4242"):
        prepare(root / "r0", NEW)


# ----- kill -9 between every pair of steps ---------------------------------------------------
STEPS = ["locked", "intent-written", "moved", "fresh-created", "manifest-written", "published",
         "intent-removed"]


def _crash_at(root: str, step: str) -> None:
    def hook(reached: str) -> None:
        if reached == step:
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no cleanup, no finally blocks

    prepare(Path(root) / "r0", NEW, now=NOW, crash_hook=hook)
    os._exit(0)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("unkeyed", [False, True], ids=["stale", "unkeyed"])
def test_kill9_between_steps_recovers(tmp_path: Path, step: str, unkeyed: bool) -> None:
    root = tmp_path / "cache"
    files = old_cache(root, key=None if unkeyed else OLD)
    child = CTX.Process(target=_crash_at, args=(str(root), step))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL, f"the child did not die at {step}"
    result = prepare(root / "r0", NEW, now=NOW)
    [aside] = stale_dirs(root)
    assert_kept(aside, files)
    manifest = read_manifest(root / "r0")
    assert manifest is not None and manifest["key"] == NEW.digest
    assert manifest["replaced"]["moved_to"] == aside.name
    assert not (root / ".r0.intent.json").exists() and not (root / ".r0.new").exists()
    assert [p.name for p in root.iterdir() if p.name.endswith(".tmp")] == []
    if step == "intent-removed":
        assert result.reused  # the first run finished everything but returning
    else:
        assert result.moved_aside == aside  # the recovering run reports the move
        if not unkeyed:
            assert {c.factor for c in result.changed} == {"speculative.k", "env.RADIANCE_X"}


def test_kill9_with_a_fresh_root(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    for step in ("fresh-created", "manifest-written"):
        child = CTX.Process(target=_crash_at, args=(str(root), step))
        child.start()
        child.join(60)
        assert child.exitcode == -signal.SIGKILL
    result = prepare(root / "r0", NEW, now=NOW)
    assert result.state_before == "absent" and stale_dirs(root) == []


def test_interrupted_move_towards_another_key(tmp_path: Path) -> None:
    """Killed while moving towards key NEW; the next run wants a third key: nothing is lost."""
    root = tmp_path / "cache"
    files = old_cache(root)
    child = CTX.Process(target=_crash_at, args=(str(root), "moved"))
    child.start()
    child.join(60)
    third = make_key(tp=4)
    result = prepare(root / "r0", third, now=NOW)
    assert result.state_before == "absent"
    [aside] = stale_dirs(root)
    assert_kept(aside, files)
    assert read_manifest(root / "r0")["key"] == third.digest  # type: ignore[index]


# ----- two processes at once -----------------------------------------------------------------
def _racer(root: str, barrier: Any, queue: Any) -> None:
    barrier.wait(30)
    result = prepare(Path(root) / "r0", NEW, now=NOW)
    queue.put((str(result.moved_aside) if result.moved_aside else None, result.state_before))


def test_two_processes_prepare_at_once(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    files = old_cache(root)
    barrier = CTX.Barrier(2)
    queue = CTX.Queue()
    racers = [CTX.Process(target=_racer, args=(str(root), barrier, queue)) for _ in range(2)]
    for racer in racers:
        racer.start()
    results = sorted([queue.get(timeout=60), queue.get(timeout=60)], key=lambda r: r[1])
    for racer in racers:
        racer.join(30)
        assert racer.exitcode == 0
    assert results[0] == (None, "current")
    assert results[1][1] == "stale" and results[1][0] is not None
    [aside] = stale_dirs(root)
    assert str(aside) == results[1][0]
    assert_kept(aside, files)
    assert read_manifest(root / "r0")["key"] == NEW.digest  # type: ignore[index]




def _racer_key(root: str, barrier: Any, queue: Any, factors: dict[str, Any]) -> None:
    barrier.wait(30)
    result = prepare(Path(root) / "r0", make_key(**factors), now=NOW)
    queue.put((str(result.moved_aside) if result.moved_aside else None, result.state_before))


def test_processes_wanting_different_keys_lose_nothing(tmp_path: Path) -> None:
    """Three processes at once, two keys: each move is serialised, every dir is kept whole."""
    root = tmp_path / "cache"
    files = old_cache(root)
    wanted = [{"tp": 4}, {"tp": 8}, {"tp": 4}]
    barrier = CTX.Barrier(len(wanted))
    queue = CTX.Queue()
    racers = [CTX.Process(target=_racer_key, args=(str(root), barrier, queue, f)) for f in wanted]
    for racer in racers:
        racer.start()
    results = [queue.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(30)
        assert racer.exitcode == 0
    moved = sorted(Path(m) for m, _ in results if m is not None)
    assert moved == stale_dirs(root) and len(moved) >= 1
    with_old_files = [d for d in moved if (d / MANIFEST_NAME).read_bytes() == files[MANIFEST_NAME]]
    assert len(with_old_files) == 1
    assert_kept(with_old_files[0], files)
    final = read_manifest(root / "r0")
    assert final is not None and final["factors"]["tp"] in (4, 8)
    assert not (root / ".r0.intent.json").exists() and not (root / ".r0.new").exists()


def test_held_lock_times_out_and_changes_nothing(tmp_path: Path) -> None:
    """While another holder has the replica's flock, prepare waits, then says who holds what."""
    root = tmp_path / "cache"
    files = old_cache(root)
    held = pytest.raises(LockTimeout, match=r"\.r0\.lock: still locked")
    with exclusive_lock(lock_path(root, "r0")), held:
        prepare(root / "r0", NEW, now=NOW, lock_timeout_s=0.2)
    assert stale_dirs(root) == [] and not (root / ".r0.intent.json").exists()
    assert_kept(root / "r0", files)


def test_rollback_by_renaming_reuses_the_old_cache(tmp_path: Path) -> None:
    """docs/cache.md "Rolling back": rename the moved-aside dir back; the old key reuses it."""
    root = tmp_path / "cache"
    files = old_cache(root)
    moved = prepare(root / "r0", NEW, now=NOW).moved_aside
    assert moved is not None
    os.rename(root / "r0", root / "r0.stale-20261129T150000Z")
    os.rename(moved, root / "r0")
    back = prepare(root / "r0", OLD, now=NOW)
    assert back.reused and back.moved_aside is None
    assert_kept(root / "r0", files)


# ----- planted names: never follow a link we did not make (issue 11) --------------------------
def test_planted_fresh_symlink_is_refused_before_anything_moves(tmp_path: Path) -> None:
    """Before: prepare built the fresh cache through `.r0.new -> elsewhere`, then renamed the
    link onto the live name: r0 became a link to a directory of the planter's choice."""
    root = tmp_path / "cache"
    files = old_cache(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".r0.new").symlink_to(elsewhere)
    refused = r"\.r0\.new is a symlink to .*elsewhere: rocmseat makes no links"
    with pytest.raises(ConfigError, match=refused):
        prepare(root / "r0", NEW, now=NOW)
    assert list(elsewhere.iterdir()) == []
    assert not (root / "r0").is_symlink()
    assert_kept(root / "r0", files)
    assert stale_dirs(root) == [] and not (root / ".r0.intent.json").exists()


@pytest.mark.parametrize("kind", ["file", "dangling-link", "fifo"])
def test_planted_fresh_name_of_another_kind_is_refused(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "cache"
    files = old_cache(root)
    fresh = root / ".r0.new"
    if kind == "file":
        fresh.write_text("x")
    elif kind == "fifo":
        os.mkfifo(fresh)
    else:
        fresh.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"\.r0\.new (is not a directory|is a symlink)"):
        prepare(root / "r0", NEW, now=NOW)
    assert_kept(root / "r0", files)
    assert stale_dirs(root) == []


def test_planted_lock_symlink_is_refused(tmp_path: Path) -> None:
    """flock's open(O_CREAT) would follow the link and create (as root: any) file it names."""
    root = tmp_path / "cache"
    old_cache(root)
    target = tmp_path / "etc-nologin"
    (root / ".r0.lock").symlink_to(target)
    with pytest.raises(ConfigError, match=r"\.r0\.lock is a symlink"):
        prepare(root / "r0", NEW, now=NOW)
    assert not target.exists()


def _prepare_in_child(root: str, queue: Any) -> None:
    import resource

    # a regression reading /dev/zero must fail this child, not take the host's memory
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
    try:
        prepare(Path(root) / "r0", NEW, now=NOW)
        queue.put("prepared")
    except ConfigError as exc:
        queue.put(f"ConfigError: {exc}")
    except BaseException as exc:
        queue.put(f"CRASH {type(exc).__name__}: {exc}")


def _bounded_prepare(root: Path) -> str:
    queue = CTX.Queue()
    child = CTX.Process(target=_prepare_in_child, args=(str(root), queue))
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
        child.join(10)
        pytest.fail("prepare still running after 20 s")
    return str(queue.get(timeout=5))


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero"])
def test_planted_intent_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    """Before: a FIFO at the intent's name blocked prepare forever; /dev/zero was read until
    memory ran out."""
    root = tmp_path / "cache"
    files = old_cache(root)
    intent = root / ".r0.intent.json"
    if kind == "fifo":
        os.mkfifo(intent)
    else:
        intent.symlink_to("/dev/zero")
    message = _bounded_prepare(root)
    assert message.startswith("ConfigError: ") and ".r0.intent.json is" in message, message
    assert_kept(root / "r0", files)


def test_compiler_cache_subfolder_link_is_refused(tmp_path: Path) -> None:
    """A subfolder that is a link puts that compiler cache outside the store: a move aside
    would carry the link, not the cache."""
    root = tmp_path / "cache"
    prepare(root / "r0", NEW, now=NOW)
    outside = tmp_path / "outside-triton"
    outside.mkdir()
    os.rmdir(root / "r0" / "triton-home")
    (root / "r0" / "triton-home").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"r0/triton-home is a symlink to .*outside-triton"):
        prepare(root / "r0", NEW, now=NOW)


def test_world_writable_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o1777)
    with pytest.raises(ConfigError, match=r"cache root .* is writable by every user \(mode 1777\)"):
        prepare(root / "r0", NEW, now=NOW)
    assert list(root.iterdir()) == []


# ----- kill -9 inside an atomic write: its temp file is cleaned on the next run ---------------
def _crash_in_write(root: str, name: str) -> None:
    """Die (SIGKILL) inside rocmseat.atomic's write of `name`: after the temp file is written
    and fsynced, before os.replace publishes it."""
    real_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).name == name:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst, *args, **kwargs)

    os.replace = replace  # type: ignore[assignment]  # this child process only
    prepare(Path(root) / "r0", NEW, now=NOW)
    os._exit(0)


def _temporaries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


@pytest.mark.parametrize(("before", "name"), [
    ("stale", ".r0.intent.json"), ("stale", MANIFEST_NAME), ("absent", MANIFEST_NAME),
])
def test_kill9_inside_an_atomic_write_leaves_no_temp_file(
    tmp_path: Path, before: str, name: str
) -> None:
    root = tmp_path / "cache"
    files = old_cache(root) if before == "stale" else {}
    child = CTX.Process(target=_crash_in_write, args=(str(root), name))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL, "the child did not die inside the write"
    assert _temporaries(root), "the kill left no temp file: the test did not hit the write"
    result = prepare(root / "r0", NEW, now=NOW)
    assert _temporaries(root) == []
    manifest = read_manifest(root / "r0")
    assert manifest is not None and manifest["key"] == NEW.digest
    assert not (root / ".r0.intent.json").exists() and not (root / ".r0.new").exists()
    if before == "stale":
        [aside] = stale_dirs(root)
        assert_kept(aside, files)
        assert result.moved_aside == aside
    else:
        assert result.state_before == "absent"


# ----- the move is said once: by the caller, not by logging's last-resort handler -------------
MOVE_TWICE = """
import datetime as dt, sys
from pathlib import Path
from rocmseat.cache.key import ConfigKey, digest_of
from rocmseat.cache.store import prepare
def key(**f):
    base = {"key_schema": 1, **f}
    return ConfigKey(digest_of(base), base)
root = Path(sys.argv[1])
prepare(root / "r0", key(k=7))
result = prepare(root / "r0", key(k=5))
print(result.message)
"""


def test_moved_aside_is_not_printed_by_logging(tmp_path: Path) -> None:
    """Before: the `rocmseat.cache` logger had no handler, so Python's last-resort handler
    printed the warning on stderr and launch printed the same line again."""
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "-c", MOVE_TWICE, str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "moved cache aside" in done.stdout  # the caller has the line to say
    assert done.stderr == ""


def test_intent_naming_another_replica_is_dropped(tmp_path: Path) -> None:
    """An intent whose `moved_to` is not a moved-aside name of this replica (here r1's live dir)
    is not one prepare wrote: it is dropped and the cache judged afresh. Before: prepare said
    "moved cache aside to .../r1", left r0 under the old key and returned it as new."""
    root = tmp_path / "cache"
    files = old_cache(root)
    (root / "r1").mkdir()
    (root / "r1" / "keep").write_text("r1's")
    (root / ".r0.intent.json").write_text(json.dumps({
        "action": "move-aside", "state_before": "stale", "moved_to": "r1",
        "new_key": NEW.digest, "changed": [],
    }))
    result = prepare(root / "r0", NEW, now=NOW)
    assert result.moved_aside == root / f"r0.stale-{STAMP}"
    assert_kept(root / f"r0.stale-{STAMP}", files)
    assert read_manifest(root / "r0")["key"] == NEW.digest  # type: ignore[index]
    assert (root / "r1" / "keep").read_text() == "r1's"


@pytest.mark.parametrize("name", ["Bad Name", ".r0", "r0.stale-20260101T000000Z", "R0"])
def test_prepare_takes_a_replicas_cache_dir_only(tmp_path: Path, name: str) -> None:
    """prepare works on the placement record's cache_dir (<cache_root>/<replica>): the store
    no longer spells the live dir itself; a dir that cannot be a replica's is refused before
    anything is made."""
    root = tmp_path / "cache"
    with pytest.raises(ConfigError, match="not a replica's cache dir"):
        prepare(root / name, NEW, now=NOW)
    assert not root.exists()
