"""Issue 26, item 6: with `[remediate] mode = "on"` the rendered watch unit can write what
remediation writes. Before, the watch unit was the same whether remediation was on or off
(ProtectSystem=strict, only the cache root and state dir writable), so the no-drafter step's
drop-in beside the replica unit failed with EROFS. Every remediation action runs here for real
(systemctl recorded, never run: tests never touch the host's systemd) and every path it
changed must lie under the rendered unit's ReadWritePaths=."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

DEMO = REPO / "launchers" / "demo-cpu.toml"
BIN = "/usr/local/bin/rocmseat"


def seat_file(tmp_path: Path, extra: str = "") -> Path:
    text = DEMO.read_text()
    text = text.replace('"/var/tmp/rocmseat-demo/cache"', f'"{tmp_path / "cache"}"')
    text = text.replace('"/var/tmp/rocmseat-demo/state"', f'"{tmp_path / "state"}"')
    text += f'\n[remediate]\nmode = "on"\nunit_dir = "{tmp_path / "units"}"\n{extra}'
    path = tmp_path / "seat.toml"
    path.write_text(text)
    return path


def render(rocmseat_cli, seat: Path, out: Path, *extra: str):
    return rocmseat_cli("systemd", "render", str(seat), "--out", str(out), "--rocmseat-bin",
                        *extra)


def writable(unit_text: str) -> list[Path]:
    (line,) = [x for x in unit_text.splitlines() if x.startswith("ReadWritePaths=")]
    return [Path(p) for p in line.split("=", 1)[1].split()]


def changed(root: Path, before: dict[Path, float]) -> set[Path]:
    now = {p: p.lstat().st_mtime_ns for p in root.rglob("*")}
    return {p for p, m in now.items() if before.get(p) != m} | (set(before) - set(now))


def test_every_remediation_write_is_under_the_watch_units_writable_paths(rocmseat_cli,
                                                                         tmp_path):
    from rocmseat.placement.resolve import resolve
    from rocmseat.runner import Completed
    from rocmseat.seat.load import load_seat
    from rocmseat.watch.remediate import journal
    from rocmseat.watch.remediate.actions import SeatEdge

    path = seat_file(tmp_path)
    units = tmp_path / "units"
    result = render(rocmseat_cli, path, units, BIN)
    assert result.exit_code == 0, result.stderr
    watch = (units / "rocmseat-demo-cpu-watch.service").read_text()
    rw = writable(watch)
    dropin_dir = units / "rocmseat-demo-cpu-r0.service.d"
    assert rw == [tmp_path / "cache", tmp_path / "state", dropin_dir]
    # the drop-in dir exists before the sandbox is set up (ReadWritePaths= needs it)
    assert (f"ExecStartPre=+mkdir -p {tmp_path / 'cache'} {tmp_path / 'state'} {dropin_dir}"
            in watch)

    seat = load_seat(path)
    records = {r.replica: r for r in resolve(seat, None, state_root=tmp_path / "state")}
    records["r0"].cache_dir.mkdir(parents=True)
    dropin_dir.mkdir()  # what the unit's ExecStartPre=+mkdir does, as root, before the sandbox
    (records["r0"].cache_dir / "torch_compile_cache").mkdir()
    before = {p: p.lstat().st_mtime_ns for p in tmp_path.rglob("*")}
    calls = []

    def systemctl(argv, **kw):
        calls.append(list(argv))
        return Completed(tuple(argv), 0, "", "")

    edge = SeatEdge(seat, records, runner=systemctl)
    assert edge.move_cache_aside("r0", {"why": "test"}) is not None  # step 1
    edge.restart("r0", "no-drafter", why="step 2")  # step 2: the drop-in
    edge.restart("r0", "drafter", why="reset")  # back: the drop-in goes
    journal_dir = journal.seat_dir(tmp_path / "state", seat.name)
    written = changed(tmp_path, before) | {journal_dir}
    assert calls[0] == ["systemctl", "daemon-reload"]
    outside = sorted(p for p in written if not any(p.is_relative_to(w) for w in rw))
    assert outside == [], outside
    assert any(p.is_relative_to(dropin_dir) for p in written)  # the step that failed before
    print(f"\nwatch unit ReadWritePaths: {' '.join(map(str, rw))}\nremediation wrote: "
          + " ".join(sorted(str(p.relative_to(tmp_path)) for p in written)))


def test_off_dry_run_and_a_restart_command_add_nothing(rocmseat_cli, tmp_path):
    for extra, mode in (("", "off"), ("", "dry-run"), ('restart_command = ["/bin/true"]', "on")):
        path = seat_file(tmp_path, extra)
        path.write_text(path.read_text().replace('mode = "on"', f'mode = "{mode}"'))
        out = tmp_path / f"units-{mode}-{bool(extra)}"
        assert render(rocmseat_cli, path, out, BIN).exit_code == 0
        watch = (out / "rocmseat-demo-cpu-watch.service").read_text()
        assert writable(watch) == [tmp_path / "cache", tmp_path / "state"]


def test_user_with_systemd_restarts_is_refused(rocmseat_cli, tmp_path):
    path = seat_file(tmp_path)
    result = render(rocmseat_cli, path, tmp_path / "units", BIN, "--user", "rocmseat")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        'rocmseat: error: seat demo-cpu: [remediate] mode = "on" restarts the replica units '
        "through systemd, which the watch unit cannot do as --user rocmseat")
    assert not (tmp_path / "units").exists()


@pytest.mark.tools
def test_the_remediating_watch_unit_passes_systemd_analyze_verify(rocmseat_cli, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    from tests.cli.test_systemd import installed_rocmseat

    path = seat_file(tmp_path)
    units = tmp_path / "units"
    assert render(rocmseat_cli, path, units, str(installed_rocmseat())).exit_code == 0
    (units / "rocmseat-demo-cpu-r0.service.d").mkdir()
    proc = subprocess.run([analyze, "verify", *(str(p) for p in sorted(units.glob("*.service")))],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
