"""`rocmseat systemd render/install`: golden unit files, and `systemd-analyze verify` (tools)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

R9700 = str(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
DEMO = str(REPO / "launchers" / "demo-cpu.toml")
X99 = str(FIXTURES / "sysfs" / "x99-r9700")
BIN = "/usr/local/bin/rocmseat"


def normalise(text: str) -> str:
    """The checkout's path out, and with it the content hash of the first line (it covers the
    paths); each rendered unit's hash is checked against its text where it is rendered."""
    from rocmseat.launch.units import rendered_state

    assert rendered_state(text) == "pristine"
    return re.sub(r"sha256:[0-9a-f]{64} ", "sha256:<hash> ",
                  text.replace(str(REPO), "<repo>"), count=1)


def render(rocmseat_cli, seat, out: Path, *extra: str):
    result = rocmseat_cli("systemd", "render", seat, "--out", str(out), "--sysfs-root", X99,
                          *extra)
    assert result.exit_code == 0, result.stderr
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


def test_render_r9700_golden(rocmseat_cli, golden, tmp_path):
    units = render(rocmseat_cli, R9700, tmp_path, "--rocmseat-bin", BIN)
    assert sorted(units) == [
        "rocmseat-r9700-mxfp4-dflash-preflight.service",
        "rocmseat-r9700-mxfp4-dflash-r0.service",
        "rocmseat-r9700-mxfp4-dflash-r1.service",
        "rocmseat-r9700-mxfp4-dflash-watch.service",
    ]
    for name, text in units.items():
        golden(f"units/{name}", normalise(text))
    r0 = units["rocmseat-r9700-mxfp4-dflash-r0.service"]
    assert "Type=notify\nNotifyAccess=main\n" in r0
    # the pair's sysfs preflight, judged by launch's rule; launch then runs the HIP probe once
    # the pair is the replica's identity, fixed at render time (--pair): launch refuses to
    # start r0 anywhere else
    assert ("ExecStartPre=/usr/local/bin/rocmseat launch <repo>/launchers/"
            "r9700-mxfp4-dflash.toml --replica r0 --state-dir /var/lib/rocmseat "
            "--pair 0000:05:00.0,0000:09:00.0 --preflight-only\n") in normalise(r0)
    assert "ExecStartPre=-" not in r0 and "SupplementaryGroups" not in r0  # root: no groups
    assert "TimeoutStartSec=1080\n" in r0  # 900 s readiness + 180 s margin
    assert "KillMode=mixed\nKillSignal=SIGTERM\n" in r0
    assert "DevicePolicy=closed\nDeviceAllow=/dev/kfd rw\nDeviceAllow=char-drm rw\n" in r0
    assert "ReadWritePaths=/var/cache/rocmseat/r9700-mxfp4-dflash /var/lib/rocmseat\n" in r0
    assert "\nRestartSteps=" not in r0  # systemd 252 does not know it
    r1 = units["rocmseat-r9700-mxfp4-dflash-r1.service"]
    assert ("--replica r1 --state-dir /var/lib/rocmseat --pair 0000:86:00.0,0000:89:00.0 "
            "--preflight-only") in r1
    assert "NUMA node 1, port 8001" in r1
    node = units["rocmseat-r9700-mxfp4-dflash-preflight.service"]
    assert ("--pair 0000:05:00.0,0000:09:00.0 --pair 0000:86:00.0,0000:89:00.0 --profile "
            in node)
    assert node.count("--no-hip") == 1 and "DeviceAllow" not in node


def test_render_cpu_seat_golden(rocmseat_cli, golden, tmp_path):
    units = render(rocmseat_cli, DEMO, tmp_path, "--rocmseat-bin", BIN, "--user", "rocmseat")
    assert sorted(units) == ["rocmseat-demo-cpu-r0.service", "rocmseat-demo-cpu-watch.service"]
    for name, text in units.items():
        golden(f"units/{name}", normalise(text))
    r0 = units["rocmseat-demo-cpu-r0.service"]
    assert "preflight" not in r0.split("[Service]")[1].split("ExecStart=")[0].replace(
        "ExecStartPre=+mkdir", "")
    assert "DeviceAllow" not in r0 and "User=rocmseat\n" in r0


def test_install_under_root(rocmseat_cli, tmp_path):
    result = rocmseat_cli("systemd", "install", R9700, "--root", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", BIN)
    assert result.exit_code == 0, result.stderr
    unit_dir = tmp_path / "etc" / "systemd" / "system"
    assert len(list(unit_dir.glob("rocmseat-r9700-mxfp4-dflash-*.service"))) == 4
    # issue 19, first-day traps: nothing pulls the watch unit in, so the line names it too
    # (it used to stop after the replicas); the preflight unit comes with them (Wants=)
    assert result.stdout.splitlines()[-1] == (
        "start with: systemctl enable --now rocmseat-r9700-mxfp4-dflash-r0.service "
        "rocmseat-r9700-mxfp4-dflash-r1.service rocmseat-r9700-mxfp4-dflash-watch.service")
    assert "Wants=network-online.target rocmseat-r9700-mxfp4-dflash-preflight.service" in (
        unit_dir / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()


@pytest.fixture(autouse=True)
def _checkout_outside_private_tmp(monkeypatch):
    """CI may clone this repository under /tmp; then the shipped seat files themselves sit
    under the unit's private /tmp and every render warns about them (rightly). The tests
    here are about the seats' own paths, so the checkout counts as outside /tmp."""
    import rocmseat.launch.install as unit_install

    real = unit_install.private_tmp_paths

    def outside_checkout(paths):
        return [(what, path) for what, path in real(paths)
                if not Path(path).resolve().is_relative_to(REPO)]

    monkeypatch.setattr(unit_install, "private_tmp_paths", outside_checkout)


PRIVATE_TMP_WARNING = (
    "under /tmp or /var/tmp, which the units cannot see (they run with PrivateTmp=yes: a "
    "private, empty /tmp and /var/tmp of their own); move them out of /tmp and /var/tmp")


def test_render_warns_about_paths_private_tmp_hides(rocmseat_cli, tmp_path):
    """Issue 19, first-day traps: the demo seat keeps its models, cache and state under
    /var/tmp and its units run with PrivateTmp=yes, so the unit saw none of them; render said
    nothing. It now names each hidden path and where it comes from."""
    result = rocmseat_cli("systemd", "render", DEMO, "--out", str(tmp_path / "out"),
                          "--rocmseat-bin", BIN)
    assert result.exit_code == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("rocmseat: warning: --state-dir /var/tmp/rocmseat-demo/state, "
                           "cache_root /var/tmp/rocmseat-demo/cache, model.path "
                           "/var/tmp/rocmseat-demo/models/target, drafter.path "
                           "/var/tmp/rocmseat-demo/models/drafter: " + PRIVATE_TMP_WARNING)
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path / "r9700"),
                          "--sysfs-root", X99, "--rocmseat-bin", BIN)
    assert result.exit_code == 0 and result.stderr == ""  # its paths are outside /tmp


def test_install_refuses_paths_private_tmp_hides(rocmseat_cli, tmp_path, monkeypatch):
    """Into the running system the trap is refused with the fix, before anything is written
    (and daemon-reload is never reached); under --root (another system) it is a warning."""
    import rocmseat.launch.install as unit_install

    monkeypatch.setattr(unit_install, "UNIT_DIR", tmp_path / "never")  # absolute: / ignored
    result = rocmseat_cli("systemd", "install", DEMO, "--rocmseat-bin", BIN)
    assert result.exit_code == 2
    assert result.stderr.startswith("rocmseat: error: --state-dir /var/tmp/rocmseat-demo/state")
    assert "(they run with PrivateTmp=yes: a private, empty /tmp and /var/tmp of their own)" \
        in result.stderr
    assert "hint: move them out of /tmp and /var/tmp (e.g. /srv/rocmseat" in result.stderr
    assert not (tmp_path / "never").exists()
    result = rocmseat_cli("systemd", "install", DEMO, "--root", str(tmp_path / "image"),
                          "--rocmseat-bin", BIN)
    assert result.exit_code == 0, result.stderr
    assert PRIVATE_TMP_WARNING in result.stderr
    assert result.stdout.splitlines()[-1] == ("start with: systemctl enable --now "
                                              "rocmseat-demo-cpu-r0.service "
                                              "rocmseat-demo-cpu-watch.service")


@pytest.mark.parametrize(("path", "hidden"), [
    ("/tmp", True), ("/tmp/x", True), ("/var/tmp/a/b", True), ("/tmpfoo", False),
    ("/var/tmpx/a", False), ("/var/lib/rocmseat", False), ("/srv/tmp", False)])
def test_private_tmp_paths(path, hidden):
    from rocmseat.launch.install import private_tmp_paths

    assert bool(private_tmp_paths([("x", Path(path))])) is hidden


def test_relative_bin_is_refused(rocmseat_cli, tmp_path):
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", "bin/rocmseat")
    assert result.exit_code == 2
    assert "must be an absolute path" in result.stderr


def installed_rocmseat() -> Path:
    from rocmseat.errors import RocmseatError
    from rocmseat.launch.install import default_bin

    try:
        return default_bin()
    except RocmseatError:
        pytest.skip("the rocmseat console script is not installed (pip install -e .)")


@pytest.mark.tools
@pytest.mark.parametrize("seat", [R9700, DEMO], ids=["r9700", "demo-cpu"])
def test_systemd_analyze_verify(rocmseat_cli, tmp_path, seat):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    units = render(rocmseat_cli, seat, tmp_path, "--rocmseat-bin", str(installed_rocmseat()))
    proc = subprocess.run([analyze, "verify", *(str(tmp_path / n) for n in units)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    # verify prints a warning for every unknown key, bad value or missing executable
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


def test_user_adds_device_groups_and_warns_when_missing(rocmseat_cli, tmp_path, monkeypatch):
    import rocmseat.launch.install as unit_install

    monkeypatch.setattr(unit_install, "missing_groups", lambda groups: [g for g in groups
                                                                        if g == "render"])
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", BIN, "--user", "vllm")
    assert result.exit_code == 0, result.stderr
    r0 = (tmp_path / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()
    assert "User=vllm\n" in r0 and "SupplementaryGroups=render video\n" in r0
    assert result.stderr.startswith("rocmseat: warning: group 'render' does not exist on this "
                                    "host: systemd would refuse to start the units "
                                    "(status=216/GROUP")


def test_install_refuses_missing_group(rocmseat_cli, tmp_path, monkeypatch):
    """Without --root the units are for this host: a missing group is an error, nothing is
    written (and daemon-reload is never reached)."""
    import rocmseat.launch.install as unit_install

    monkeypatch.setattr(unit_install, "missing_groups", lambda groups: list(groups))
    monkeypatch.setattr(unit_install, "UNIT_DIR", tmp_path / "never")  # absolute: / ignored
    result = rocmseat_cli("systemd", "install", R9700, "--sysfs-root", X99, "--rocmseat-bin",
                          BIN, "--user", "vllm")
    assert result.exit_code == 2
    assert "group 'render', 'video' does not exist on this host" in result.stderr
    assert not (tmp_path / "never").exists()


def test_missing_groups_reads_the_group_database():
    import grp

    import rocmseat.launch.install as unit_install

    present = grp.getgrgid(0).gr_name
    assert unit_install.missing_groups((present, "no-such-group-rocmseat")) == [
        "no-such-group-rocmseat"]


def test_install_keeps_a_foreign_unit(rocmseat_cli, tmp_path):
    unit_dir = tmp_path / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    foreign = unit_dir / "rocmseat-r9700-mxfp4-dflash-r0.service"
    foreign.write_text("[Service]\nExecStart=/usr/bin/true\n")
    args = ("systemd", "install", R9700, "--root", str(tmp_path), "--sysfs-root", X99,
            "--rocmseat-bin", BIN)
    result = rocmseat_cli(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"rocmseat: error: {foreign}: exists, differs and was not "
                                    "rendered by rocmseat (or by one that kept no content "
                                    "hash); not overwritten")
    assert foreign.read_text() == "[Service]\nExecStart=/usr/bin/true\n"
    assert sorted(p.name for p in unit_dir.iterdir()) == [foreign.name]  # nothing half-done
    result = rocmseat_cli(*args, "--force")
    assert result.exit_code == 0, result.stderr
    assert f"replaced {foreign}" in result.stdout
    again = rocmseat_cli(*args)  # a re-install of our own units: unchanged, no refusal
    assert again.exit_code == 0 and again.stdout.count("unchanged ") == 4


def test_install_never_overwrites_a_hand_edited_unit(rocmseat_cli, tmp_path):
    """Issue 10: docs/launch.md promised that a hand edit is not overwritten, but install only
    looked for the "Rendered by" header, which an edited unit still has. The header now carries
    the hash of the lines below it: an edit breaks it, install refuses, --force replaces."""
    args = ("systemd", "install", R9700, "--root", str(tmp_path), "--sysfs-root", X99,
            "--rocmseat-bin", BIN)
    assert rocmseat_cli(*args).exit_code == 0
    unit = tmp_path / "etc" / "systemd" / "system" / "rocmseat-r9700-mxfp4-dflash-r1.service"
    edited = unit.read_text().replace("RestartSec=30", "RestartSec=5")
    unit.write_text(edited)
    other = tmp_path / "other-state"  # a real change of the rendered units
    result = rocmseat_cli(*args, "--state-dir", str(other))
    assert result.exit_code == 2  # (after a warning: the tmp state dir is hidden by PrivateTmp)
    assert result.stderr.splitlines()[-2].startswith(
        f"rocmseat: error: {unit}: exists, differs and was edited after rocmseat rendered it "
        "(its content no longer matches the hash in its first line); not overwritten")
    assert unit.read_text() == edited
    assert str(other) not in "".join(p.read_text() for p in unit.parent.iterdir())  # nothing
    result = rocmseat_cli(*args, "--state-dir", str(other), "--force")
    assert result.exit_code == 0, result.stderr
    assert f"replaced {unit}" in result.stdout and "RestartSec=30" in unit.read_text()
    # an unedited unit of ours is replaced by a re-render without --force
    result = rocmseat_cli(*args)
    assert result.exit_code == 0 and result.stdout.count("replaced ") == 4, result.stderr


def test_render_to_unwritable_out_is_one_line(rocmseat_cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(blocker / "units"),
                          "--sysfs-root", X99, "--rocmseat-bin", BIN)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"rocmseat: error: {blocker / 'units'}/rocmseat-")
    assert "cannot write (--out): Not a directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_templates_fall_back_to_the_installed_data_files(tmp_path, monkeypatch):
    """A non-editable install has no checkout: the templates come from
    <sys.prefix>/share/rocmseat/systemd (pyproject data-files)."""
    import rocmseat.launch.units as units

    shared = tmp_path / "prefix" / "share" / "rocmseat" / "systemd"
    shared.mkdir(parents=True)
    for kind in ("replica", "preflight", "watch"):
        (shared / f"{kind}.service.in").write_text(f"# {kind} from share\n")
    monkeypatch.setattr(units, "__file__", str(tmp_path / "site" / "rocmseat" / "launch" /
                                                "units.py"))
    monkeypatch.setattr(units.sys, "prefix", str(tmp_path / "prefix"))
    assert units.template_dirs()[1] == shared
    assert units.load_templates()["watch"] == "# watch from share\n"
    monkeypatch.setattr(units.sys, "prefix", str(tmp_path / "empty"))
    from rocmseat.errors import ReadError

    with pytest.raises(ReadError, match=r"unit templates looked for in .*site/systemd or "
                                        r".*empty/share/rocmseat/systemd"):
        units.load_templates()


@pytest.mark.tools
def test_verify_does_not_catch_a_missing_group_so_render_warns(rocmseat_cli, tmp_path):
    """systemd-analyze verify accepts SupplementaryGroups= naming a group the host lacks
    (systemd itself would refuse the start: 216/GROUP), so rocmseat checks it itself."""
    import grp

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    try:
        grp.getgrnam("render")
        pytest.skip("this host has a render group; the gap cannot be shown here")
    except KeyError:
        pass
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", str(installed_rocmseat()), "--user", "root")
    assert result.exit_code == 0, result.stderr
    assert "group 'render' does not exist on this host" in result.stderr
    units = sorted(tmp_path.iterdir())
    assert "SupplementaryGroups=render video\n" in units[1].read_text()
    proc = subprocess.run([analyze, "verify", *map(str, units)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (0, "")


# ----- how systemd reads the rendered values back --------------------------------------------
# systemd.syntax(7) "Quoting": whitespace separates words, "..." or '...' wrap one, C escapes
# apply; systemd.unit(5) "Specifiers": `%%` is a literal `%`, any other `%x` is replaced;
# systemd.service(5) "Command lines": in the arguments `$$` is a literal `$` and `$NAME` /
# `${NAME}` are replaced, the program path is taken as is; systemd.exec(5): ReadWritePaths= and
# Environment= expand no variables. The model below refuses whatever systemd would replace, so
# a value survives only when systemd reads back exactly what rocmseat meant.
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "s": " ", "n": "\n", "t": "\t"}


def systemd_words(value: str) -> list[str]:
    words: list[str] = []
    i = 0
    while i < len(value):
        if value[i].isspace():
            i += 1
            continue
        word, quote = "", None
        if value[i] in "\"'":
            quote, i = value[i], i + 1
        while i < len(value):
            c = value[i]
            if c == "\\":
                escape = value[i + 1]
                assert escape in _ESCAPES, f"systemd would warn: unknown escape \\{escape}"
                word += _ESCAPES[escape]
                i += 2
                continue
            if quote is not None and c == quote:
                i += 1
                assert i == len(value) or value[i].isspace(), "a closing quote must end a word"
                quote = None
                break
            if quote is None and c.isspace():
                break
            word += c
            i += 1
        assert quote is None, "unterminated quote"
        words.append(word)
    return words


def specifiers(word: str) -> str:
    out, i = "", 0
    while i < len(word):
        if word[i] == "%":
            assert word[i + 1:i + 2] == "%", f"systemd would replace %{word[i + 1:i + 2]}"
            out, i = out + "%", i + 2
        else:
            out, i = out + word[i], i + 1
    return out


def dollars(word: str) -> str:
    assert not re.search(r"(?<!\$)\$(\$\$)*[A-Za-z_{]", word), f"systemd would expand {word!r}"
    return word.replace("$$", "$")


def exec_words(value: str) -> list[str]:
    words = systemd_words(value.lstrip("+-@:!"))
    return [specifiers(words[0]), *(dollars(specifiers(w)) for w in words[1:])]


def directive(unit: str, name: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(name + "=")]


HOSTILE_DIR = 'c$HOME a%n"q\\b'  # a variable, a space, a specifier, a quote, a backslash


def test_systemd_reads_back_every_path_it_is_given(rocmseat_cli, tmp_path):
    """Issue 11: `$` in cache_root became `$$` in ReadWritePaths= (which does not unescape it);
    `$` and `%` must be escaped the way systemd reads each directive."""
    odd = tmp_path / HOSTILE_DIR
    cache, state, bin_ = odd / "cache", odd / "state", odd / "bin" / "rocmseat"
    seat_file = odd / "seat.toml"
    odd.mkdir()
    seat_file.write_text(Path(R9700).read_text()
                         .replace('"/var/cache/rocmseat/r9700-mxfp4-dflash"',
                                  json.dumps(str(cache)))
                         .replace('"../checks/x99-r9700.toml"',
                                  json.dumps(str(REPO / "checks" / "x99-r9700.toml"))))
    out = tmp_path / "units"
    result = rocmseat_cli("systemd", "render", str(seat_file), "--out", str(out), "--sysfs-root",
                          X99, "--rocmseat-bin", str(bin_), "--state-dir", str(state))
    assert result.exit_code == 0, result.stderr
    r0 = (out / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()
    dirs = sorted([str(cache), str(state)])
    assert [specifiers(w) for w in systemd_words(directive(r0, "ReadWritePaths")[0])] == dirs
    make, gate = directive(r0, "ExecStartPre")
    assert make.startswith("+") and exec_words(make) == ["mkdir", "-p", *dirs]
    launch = [str(bin_), "launch", str(seat_file), "--replica", "r0", "--state-dir", str(state),
              "--pair", "0000:05:00.0,0000:09:00.0"]
    assert exec_words(gate) == [*launch, "--preflight-only"]
    assert exec_words(directive(r0, "ExecStart")[0]) == [*launch, "--stop-grace", "30"]
    watch = (out / "rocmseat-r9700-mxfp4-dflash-watch.service").read_text()
    assert exec_words(directive(watch, "ExecStart")[0]) == [
        str(bin_), "watch", str(seat_file), "--state-dir", str(state)]


def test_a_control_character_never_reaches_a_unit(tmp_path):
    """Issue 11, defence in depth (the seat loader refuses it first): a NUL in cache_root would
    end the ReadWritePaths= line and start a root `ExecStartPre=+` line."""
    from rocmseat.errors import ConfigError
    from rocmseat.launch.units import UnitContext, load_templates, render_units
    from rocmseat.node.inventory import read_inventory
    from rocmseat.placement.resolve import resolve
    from rocmseat.seat.load import load_seat

    seat = load_seat(Path(R9700))
    evil = seat.model_copy(update={"cache_root": Path("/srv/x\0ExecStartPre=+/srv/evil.sh\0#")})
    records = resolve(seat, read_inventory(Path(X99)), state_root=tmp_path)
    ctx = UnitContext(rocmseat_bin=Path(BIN), seat_file=Path(R9700), state_dir=tmp_path)
    with pytest.raises(ConfigError) as info:
        render_units(evil, records, ctx, load_templates())
    assert "key 'cache_root'" in info.value.message and "control character" in info.value.message
    assert "\0" not in info.value.message and "\n" not in info.value.message
    for field, value in (("state_dir", tmp_path / "a\nb"), ("rocmseat_bin", Path("/b\rin"))):
        bad = dataclasses.replace(ctx, **{field: value})
        with pytest.raises(ConfigError, match="control character"):
            render_units(seat, records, bad, load_templates())


@pytest.mark.tools
def test_systemd_itself_reads_back_dollar_and_percent_paths(rocmseat_cli, tmp_path):
    """The same with systemd's own parser: `systemd-analyze verify` resolves the Exec program
    (a `$` doubled there names a file that does not exist) and `systemd-analyze condition`
    resolves each ReadWritePaths= word's specifiers as the unit parser does and tests that the
    directory is there (a `$` doubled there names another path)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    odd = tmp_path / "c$HOME%n"  # no space or quote: `condition` does not unquote
    cache, state = odd / "cache", odd / "state"
    for d in (cache, state, odd / "bin"):
        d.mkdir(parents=True)
    bin_ = odd / "bin" / "rocmseat"
    bin_.symlink_to(installed_rocmseat())
    seat_file = odd / "seat.toml"
    seat_file.write_text(Path(R9700).read_text()
                         .replace('"/var/cache/rocmseat/r9700-mxfp4-dflash"',
                                  json.dumps(str(cache)))
                         .replace('"../checks/x99-r9700.toml"',
                                  json.dumps(str(REPO / "checks" / "x99-r9700.toml"))))
    out = tmp_path / "units"
    result = rocmseat_cli("systemd", "render", str(seat_file), "--out", str(out), "--sysfs-root",
                          X99, "--rocmseat-bin", str(bin_), "--state-dir", str(state))
    assert result.exit_code == 0, result.stderr
    units = sorted(out.iterdir())
    proc = subprocess.run([analyze, "verify", *map(str, units)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (0, ""), proc.stderr
    r0 = (out / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()
    words = directive(r0, "ReadWritePaths")[0].split()
    assert len(words) == 2
    for word in words:
        proc = subprocess.run([analyze, "condition", f"ConditionPathIsDirectory={word}"],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, (word, proc.stdout, proc.stderr)


def test_render_refuses_an_unclassified_env_variable_as_key_does(rocmseat_cli, tmp_path):
    """Issue 11: `systemd render` accepted an [env] variable that `key` refused. One rule now
    (rocmseat.seat.envclass.classify_env, applied when the seat loads): both refuse it with
    the same line."""
    seat_file = tmp_path / "seat.toml"
    seat_file.write_text(Path(R9700).read_text()
                         .replace('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nMY_TOGGLE = "1"')
                         .replace('"../checks/x99-r9700.toml"',
                                  json.dumps(str(REPO / "checks" / "x99-r9700.toml"))))
    render = rocmseat_cli("systemd", "render", str(seat_file), "--out", str(tmp_path / "u"),
                          "--sysfs-root", X99, "--rocmseat-bin", BIN, "--state-dir",
                          str(tmp_path / "state"))
    key = rocmseat_cli("key", str(seat_file), "--sysfs-root", X99, "--state-dir",
                       str(tmp_path / "state"))
    assert render.exit_code == key.exit_code == 2
    first = render.stderr.splitlines()[0]
    assert "key 'env.MY_TOGGLE': environment variable 'MY_TOGGLE' is not classified" in first
    assert first == key.stderr.splitlines()[0]
    assert not (tmp_path / "u").exists()


def test_a_rerender_after_a_lost_gpu_keeps_every_replica_on_its_pair(rocmseat_cli, tmp_path):
    """Review of issue 10, defect 1: a re-render on the node that lost 09:00.0 wrote r0's unit
    for (86, 89), r1's GPUs, and no unit for r1. Each replica keeps the pair it ran on (its
    placement.json): r0's unit still pins (05, 09), with a warning that it will refuse to
    start; r1's unit is r1's."""
    from tests.cli.test_launch import A, B, C, D, record_both
    from tests.placement.test_placement import lost_tree

    lost, state, out = lost_tree(tmp_path), tmp_path / "state", tmp_path / "units"
    record_both(state)
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(out), "--sysfs-root",
                          str(lost), "--state-dir", str(state), "--rocmseat-bin", BIN)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith(  # then the tmp state dir's PrivateTmp warning
        f"rocmseat: warning: replica r0: GPU {B} of replica r0's pair ({A}, {B}) is not on this "
        f"node (no such card under {lost}); its unit is rendered with its own pair and will "
        "refuse to start until that pair is back\n")
    r0 = (out / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()
    r1 = (out / "rocmseat-r9700-mxfp4-dflash-r1.service").read_text()
    assert f"--replica r0 --state-dir {state} --pair {A},{B} --stop-grace 30" in r0
    assert f"--replica r1 --state-dir {state} --pair {C},{D} --stop-grace 30" in r1
    assert "port 8001" in r1


@pytest.mark.parametrize("names", ['["watch", "r1"]', '["r0", "preflight"]'])
def test_a_replica_named_like_a_unit_of_the_seat_is_refused(rocmseat_cli, tmp_path, names):
    """Review of issue 10, defect 5: a replica named `watch` or `preflight` was rendered as
    rocmseat-<seat>-watch.service, and the seat's own unit of that name replaced it."""
    seat = tmp_path / "seat.toml"
    text = Path(R9700).read_text().replace('names = ["r0", "r1"]', f"names = {names}").replace(
        '"../checks/x99-r9700.toml"', json.dumps(str(REPO / "checks" / "x99-r9700.toml")))
    seat.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if x.startswith("names ="))
    name = json.loads(names)[0] if "watch" in names else "preflight"
    index = json.loads(names).index(name)
    for args in (("systemd", "render", str(seat), "--out", str(tmp_path / "u"), "--sysfs-root",
                  X99), ("launch", str(seat), "--dry-run", "--sysfs-root", X99)):
        result = rocmseat_cli(*args)
        assert result.exit_code == 2
        assert result.stderr.splitlines()[0] == (
            f"rocmseat: error: {seat}:{line}: key 'replicas.names': replica name {name!r} "
            f"(names[{index}]) is the name of the seat's own "
            f"rocmseat-r9700-mxfp4-dflash-{name}.service unit: the replica's unit would be "
            "replaced by it (reserved: watch, preflight)")
    assert not (tmp_path / "u").exists()


def test_unit_names_refuse_a_collision_as_a_second_lock(tmp_path):
    import dataclasses as dc

    from rocmseat.errors import ConfigError
    from rocmseat.launch.units import unit_names
    from rocmseat.node.inventory import read_inventory
    from rocmseat.placement.resolve import resolve
    from rocmseat.seat.load import load_seat

    seat = load_seat(Path(R9700))
    records = resolve(seat, read_inventory(Path(X99)), state_root=tmp_path)
    bad = [dc.replace(records[0], replica="watch"), records[1]]
    with pytest.raises(ConfigError, match=r"key 'replicas\.names': replica name 'watch' is the "
                                          r"name of the seat's own"):
        unit_names(seat, bad)


@pytest.mark.parametrize("user", ["svc\\", "root ExecStartPost=/bin/evil", "a b", "", "-x",
                                  "%n", "x" * 40, "4294967295", "r\u00e9my"])
def test_user_must_be_a_user_name(rocmseat_cli, tmp_path, user):
    """Review of issue 10: `--user 'svc\\'` and `--user 'root ExecStartPost=...'` rendered
    (User= takes one word; the rest became part of it or another setting's text)."""
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path / "u"),
                          "--sysfs-root", X99, "--rocmseat-bin", BIN, "--user", user)
    assert result.exit_code == 2
    assert "is not a user name ([a-z_][a-z0-9_-]*, at most 32 characters) or a numeric uid" in (
        result.stderr)
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "u").exists()


@pytest.mark.parametrize("user", ["svc", "rocm_serve", "_svc", "build$", "1001", "0"])
def test_good_user_names_render(rocmseat_cli, tmp_path, user, monkeypatch):
    import rocmseat.launch.install as unit_install

    monkeypatch.setattr(unit_install, "missing_groups", lambda groups: [])
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path / "u"),
                          "--sysfs-root", X99, "--rocmseat-bin", BIN, "--user", user)
    assert result.exit_code == 0, result.stderr
    assert f"\nUser={user}\n" in (tmp_path / "u" / "rocmseat-r9700-mxfp4-dflash-r0.service"
                                  ).read_text()


def test_install_never_reads_a_fifo_unit(rocmseat_cli, tmp_path):
    """Review of issue 10: `systemd install` read the unit already there with read_text, so a
    FIFO at its name hung it."""
    import os
    import threading
    import time

    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    fifo = units / "rocmseat-r9700-mxfp4-dflash-r0.service"
    os.mkfifo(fifo)
    # bounded: should a reader block on the FIFO, a writer opens and closes it after 10 s
    done = threading.Event()

    def release() -> None:
        if not done.wait(10):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=release, daemon=True).start()
    start = time.monotonic()
    result = rocmseat_cli("systemd", "install", R9700, "--root", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", BIN)
    done.set()
    assert time.monotonic() - start < 8, "install waited on the FIFO"
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "rocmseat: error: cannot read the unit already there: "
        f"{units / 'rocmseat-r9700-mxfp4-dflash-r0.service'}: is a FIFO, not a regular file")
    assert sorted(p.name for p in units.iterdir()) == ["rocmseat-r9700-mxfp4-dflash-r0.service"]


def test_install_says_a_masked_unit_is_masked(rocmseat_cli, tmp_path):
    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    masked = units / "rocmseat-r9700-mxfp4-dflash-watch.service"
    masked.symlink_to("/dev/null")
    for force in ((), ("--force",)):
        result = rocmseat_cli("systemd", "install", R9700, "--root", str(tmp_path),
                              "--sysfs-root", X99, "--rocmseat-bin", BIN, *force)
        assert result.exit_code == 2
        assert result.stderr.splitlines() == [
            f"rocmseat: error: {masked}: the unit is masked (a link to /dev/null): not "
            "overwritten",
            "  hint: unmask it first: systemctl unmask rocmseat-r9700-mxfp4-dflash-watch.service"]
        assert masked.is_symlink() and len(list(units.iterdir())) == 1


def test_an_exporter_on_an_auto_replicas_port_is_refused_where_placed(rocmseat_cli, tmp_path):
    """Review of issue 10, defect 8: an auto seat without names knew one replica when it
    loaded, so `exporter_listen` on r1's port rendered and launched; render, the dry run and
    launch resolve the placement and check the real ports."""
    seat = tmp_path / "seat.toml"
    text = (Path(R9700).read_text().replace('names = ["r0", "r1"]', "")
            .replace('"../checks/x99-r9700.toml"',
                     json.dumps(str(REPO / "checks" / "x99-r9700.toml")))
            .replace('exporter_listen = "127.0.0.1:9464"', 'exporter_listen = "[::1]:8001"'))
    seat.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "exporter_listen" in x)
    want = (f"rocmseat: error: {seat}:{line}: key 'watch.exporter_listen': port 8001 is replica "
            "r1's port (serve.port_base 8000 + 1); pick a port outside 8000..8001")
    for args in (("systemd", "render", str(seat), "--out", str(tmp_path / "u"), "--sysfs-root",
                  X99, "--rocmseat-bin", BIN),
                 ("launch", str(seat), "--dry-run", "--sysfs-root", X99),
                 ("launch", str(seat), "--replica", "r0", "--preflight-only", "--sysfs-root",
                  X99, "--state-dir", str(tmp_path / "state"))):
        result = rocmseat_cli(*args)
        assert (result.exit_code, result.stderr.splitlines()[0]) == (2, want), args
    assert not (tmp_path / "u").exists() and not (tmp_path / "state").exists()


HIVE = str(FIXTURES / "sysfs" / "mi300x-hive")


@pytest.mark.tools
@pytest.mark.parametrize("seat,replicas,pairs", [("mi300x-tp8", 1, 28), ("mi300x-tp4x2", 2, 12),
                                                 ("mi300x-dp8", 8, 0)])
def test_mi300x_seats_render_and_verify(rocmseat_cli, tmp_path, seat, replicas, pairs):
    """The MI300X seats on the hive tree: one unit per TP group, each pinned to its whole group,
    the node unit checking every pair of every group, all clean under systemd-analyze verify."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    result = rocmseat_cli("systemd", "render", str(REPO / "launchers" / f"{seat}.toml"), "--out",
                          str(tmp_path), "--sysfs-root", HIVE, "--rocmseat-bin",
                          str(installed_rocmseat()))
    assert result.exit_code == 0, result.stderr
    units = sorted(p.name for p in tmp_path.iterdir())
    assert len([u for u in units if u.split("-")[-1].startswith("r")]) == replicas
    node = (tmp_path / f"rocmseat-{seat}-preflight.service").read_text()
    assert node.count("--pair") == pairs
    proc = subprocess.run([analyze, "verify", *(str(tmp_path / n) for n in units)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr
