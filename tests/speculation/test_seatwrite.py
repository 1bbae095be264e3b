"""`spec advise --write` as a file operation (rocmseat/speculation/advise/seatedit.py
`write_drafter_schedule`, issue 18 item 6): the seat loads before and after, a file changed
between the read and the rename is refused, owner/group/mode stay, read-only and hard-linked
files are refused, locks never land outside the seat's directory, comments stay."""

from __future__ import annotations

import os
import shutil
import stat
import tomllib
from pathlib import Path

import pytest

import rocmseat.speculation.advise.seatedit as seatedit
from rocmseat.errors import ConfigError
from rocmseat.seat.load import load_seat
from rocmseat.speculation.advise.seatedit import write_drafter_schedule
from tests.conftest import FIXTURES, REPO, skip_unless_nobody_reads_the_checkout

GATE = FIXTURES / "spec" / "gate-cpu-deep"
SPEC_SEAT = REPO / "launchers" / "demo-cpu-spec.toml"
NOBODY = 65534


@pytest.fixture
def gate_dir(tmp_path):
    copy = tmp_path / "gate"
    shutil.copytree(GATE, copy)
    return copy


@pytest.fixture
def seat(tmp_path) -> Path:
    """The demo spec seat at the gate's max_num_seqs (16), drafting K=2 (the advice's measured
    K=3 tier changes it; its tied tiers keep K=2), with a comment on its K line."""
    path = tmp_path / "seats" / "spec.toml"
    path.parent.mkdir()
    text = SPEC_SEAT.read_text().replace("max_num_seqs = 64", "max_num_seqs = 16").replace(
        "num_speculative_tokens = 3", "num_speculative_tokens = 2")
    lines = text.splitlines()
    k_line = next(i for i, line in enumerate(lines) if line.startswith("num_speculative_tokens"))
    lines[k_line] += "  # chosen on 2026-11-30 by the A/B gate"
    path.write_text("\n".join(lines) + "\n")
    return path


def _advise_write(cli, gate_dir, seat, *more):
    # every tier (the deep gate's proposal has model and extrapolated tiers): these tests are
    # about how the seat is written
    return cli("spec", "advise", "--from-gate", str(gate_dir), "--write", str(seat),
               "--accept-model", *more)


def test_a_seat_rewritten_while_it_is_edited_is_refused(rocmseat_cli, gate_dir, seat,
                                                        monkeypatch):
    # the slow writer: it rewrites the seat in place after rocmseat read it. Before,
    # `written` (exit 0) and the writer's half-written file was the base of the edit; now the
    # change between read and rename (size, mtime, inode) refuses the write.
    theirs = seat.read_text().replace('name = "', 'name = "other-', 1)
    real = seatedit.parse_seat
    calls = []

    def parse_then_rewrite(text, path):
        calls.append(path)
        value = real(text, path)
        if len(calls) == 2:  # the edited text is checked: the other writer writes now
            with open(seat, "r+", encoding="utf-8") as handle:
                handle.truncate(0)
                handle.write(theirs)
        return value

    monkeypatch.setattr(seatedit, "parse_seat", parse_then_rewrite)
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 2, result.stdout
    assert "changed while rocmseat edited it" in result.stderr.splitlines()[0]
    assert seat.read_text() == theirs  # their write stands, nothing of ours replaced it
    assert [p.name for p in seat.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_half_written_seat_is_not_edited(rocmseat_cli, gate_dir, seat):
    # 55 lines became 19 in the issue: only [drafter] of a seat caught mid-write was there,
    # and the edit wrote it back as the whole seat. A seat that does not load is not edited.
    text = seat.read_text()
    half = text[text.index("[drafter]"):]
    seat.write_text(half)
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 2
    assert "(--write edits only a seat that loads)" in result.stderr.splitlines()[0]
    assert seat.read_text() == half


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")
def test_owner_group_and_mode_stay(rocmseat_cli, gate_dir, seat):
    os.chown(seat, NOBODY, NOBODY)
    os.chmod(seat, 0o640)
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 0, result.stderr
    info = seat.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (NOBODY, NOBODY, 0o640)


def test_a_read_only_seat_needs_to_be_told(rocmseat_cli, gate_dir, seat):
    os.chmod(seat, 0o444)
    before = seat.read_text()
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {seat}: is read-only (mode 0444): not written")
    assert "--write-read-only" in result.stderr and seat.read_text() == before
    told = _advise_write(rocmseat_cli, gate_dir, seat, "--write-read-only")
    assert told.exit_code == 0, told.stderr
    assert stat.S_IMODE(seat.stat().st_mode) == 0o444 and seat.read_text() != before


def test_a_hard_linked_seat_is_refused(rocmseat_cli, gate_dir, seat):
    other = seat.parent / "other-name.toml"
    os.link(seat, other)
    before = seat.read_text()
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 2
    assert "has 2 hard links" in result.stderr.splitlines()[0]
    assert seat.read_text() == before and os.path.samefile(seat, other)


def test_comments_of_the_replaced_lines_stay(rocmseat_cli, gate_dir, seat):
    before = seat.read_text()
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 0, result.stderr
    after = seat.read_text()
    k_line = next(line for line in after.splitlines()
                  if line.startswith("num_speculative_tokens ="))
    assert k_line.endswith("  # chosen on 2026-11-30 by the A/B gate")
    # the diff of what changed is in the output
    assert f"--- {seat} (before)" in result.stdout and "-num_speculative_tokens = 2" in (
        result.stdout)
    load_seat(seat)
    assert before != after


def test_a_seat_larger_than_the_gate_is_not_written(rocmseat_cli, gate_dir, seat):
    # the gate ran max_num_seqs 16; a seat of 64 got a last tier covering 17-64, never
    # evaluated (issue 18 item 11)
    seat.write_text(seat.read_text().replace("max_num_seqs = 16", "max_num_seqs = 64"))
    before = seat.read_text()
    result = _advise_write(rocmseat_cli, gate_dir, seat)
    assert result.exit_code == 2
    assert ("serve.max_num_seqs = 64, but the advice covers batch sizes up to 16: its last "
            "tier would cover batch sizes 17-64") in result.stderr.splitlines()[0]
    assert seat.read_text() == before


def test_write_into_dev_null_creates_no_lock_there(rocmseat_cli, gate_dir):
    assert not Path("/dev/.null.lock").exists()
    result = _advise_write(rocmseat_cli, gate_dir, Path("/dev/null"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "rocmseat: error: /dev/null: is a character device, not a seat file: not written")
    assert not Path("/dev/.null.lock").exists()  # created before


def test_a_symlink_loop_is_named(rocmseat_cli, gate_dir, tmp_path):
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    result = _advise_write(rocmseat_cli, gate_dir, loop)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"rocmseat: error: {loop}: is a symlink loop"


def test_the_lock_stays_beside_the_seat(gate_dir, seat, tmp_path):
    link_dir = tmp_path / "elsewhere"
    link_dir.mkdir()
    (link_dir / "spec.toml").symlink_to(seat)
    edit = write_drafter_schedule(link_dir / "spec.toml", 2, ((1, 4, 2), (5, 16, 0)))
    assert edit.changed and edit.path == seat.resolve()
    assert sorted(p.name for p in link_dir.iterdir()) == ["spec.toml"]
    assert (seat.parent / ".spec.toml.lock").exists()
    assert tomllib.loads(seat.read_text())["drafter"]["num_speculative_tokens"] == 2
    again = write_drafter_schedule(seat, 2, ((1, 4, 2), (5, 16, 0)))
    assert not again.changed and again.diff == ""


def test_an_edit_that_would_not_load_is_not_written(seat):
    # K = 0 with a [drafter] is refused by the seat schema: the edited seat must load
    before = seat.read_text()
    with pytest.raises(ConfigError, match="the edited seat would not load"):
        write_drafter_schedule(seat, 0, None)
    assert seat.read_text() == before


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                    reason="switching to nobody needs root (and a Python nobody may run)")
def test_an_owner_that_cannot_be_kept_is_refused():
    # not root and not the owner: fchown to the seat's owner fails; the edit is refused
    # rather than leaving a seat owned by whoever ran --write
    import subprocess
    import tempfile

    skip_unless_nobody_reads_the_checkout()
    # pytest's own base directory is 0700: nobody works in a directory of its own in /tmp
    holder = tempfile.TemporaryDirectory(prefix="rocmseat-owner-")
    shared = Path(holder.name)
    os.chmod(shared, 0o777)
    code = ("import sys; from pathlib import Path; from rocmseat.atomic import WriteRefused, "
            "write_into\ntry:\n    write_into(Path(sys.argv[1]), 'seat.toml', b'x', owner=(0, 0))"
            "\nexcept WriteRefused as exc:\n    print(exc.message)")
    done = subprocess.run(["/usr/bin/python3", "-c", code, str(shared)], capture_output=True,
                          text=True, timeout=60, user=NOBODY, group=NOBODY,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "cannot keep its owner (uid 0, gid 0) as uid 65534" in done.stdout
    assert list(shared.iterdir()) == []  # the temp file is gone too
    holder.cleanup()


def test_the_diff_shows_only_the_changed_lines(seat):
    # a token in [env] right after [drafter] never reaches output through the diff's context
    text = seat.read_text()
    rest, drafter = text[:text.index("[drafter]")], text[text.index("[drafter]"):]
    seat.write_text(rest.replace("[env]\n", drafter + '\n[env]\nHF_TOKEN = "hunter2"\n', 1))
    edit = write_drafter_schedule(seat, 2, ((1, 4, 2), (5, 16, 0)))
    assert edit.changed and "hunter2" not in edit.diff
    changed = [line for line in edit.diff.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed and all("num_speculative_tokens" in line for line in changed)
