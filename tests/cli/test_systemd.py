"""`rocmseat systemd render/install`: golden unit files, and `systemd-analyze verify` (tools)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
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
    assert ("ExecStartPre=/usr/local/bin/rocmseat launch <repo>/launchers/"
            "r9700-mxfp4-dflash.toml --replica r0 --state-dir /var/lib/rocmseat "
            "--preflight-only\n") in normalise(r0)
    assert "ExecStartPre=-" not in r0 and "SupplementaryGroups" not in r0  # root: no groups
    assert "TimeoutStartSec=1080\n" in r0  # 900 s readiness + 180 s margin
    assert "KillMode=mixed\nKillSignal=SIGTERM\n" in r0
    assert "DevicePolicy=closed\nDeviceAllow=/dev/kfd rw\nDeviceAllow=char-drm rw\n" in r0
    assert "ReadWritePaths=/var/cache/rocmseat/r9700-mxfp4-dflash /var/lib/rocmseat\n" in r0
    assert "\nRestartSteps=" not in r0  # systemd 252 does not know it
    r1 = units["rocmseat-r9700-mxfp4-dflash-r1.service"]
    assert "--replica r1 --state-dir /var/lib/rocmseat --preflight-only" in r1
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
    assert ("start with: systemctl enable --now rocmseat-r9700-mxfp4-dflash-r0.service "
            "rocmseat-r9700-mxfp4-dflash-r1.service") in result.stdout


def test_relative_bin_is_refused(rocmseat_cli, tmp_path):
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", "bin/rocmseat")
    assert result.exit_code == 2
    assert "must be an absolute path" in result.stderr


def installed_rocmseat() -> Path:
    beside = Path(sys.executable).parent / "rocmseat"
    if beside.is_file():
        return beside
    found = shutil.which("rocmseat")
    if found is None:
        pytest.skip("the rocmseat console script is not installed (pip install -e .)")
    return Path(found)


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
    import rocmseat.cli.systemd as cli_systemd

    monkeypatch.setattr(cli_systemd, "_missing_groups", lambda groups: [g for g in groups
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
    import rocmseat.cli.systemd as cli_systemd

    monkeypatch.setattr(cli_systemd, "_missing_groups", lambda groups: list(groups))
    monkeypatch.setattr(cli_systemd, "UNIT_DIR", tmp_path / "never")  # absolute: / ignored
    result = rocmseat_cli("systemd", "install", R9700, "--sysfs-root", X99, "--rocmseat-bin",
                          BIN, "--user", "vllm")
    assert result.exit_code == 2
    assert "group 'render', 'video' does not exist on this host" in result.stderr
    assert not (tmp_path / "never").exists()


def test_missing_groups_reads_the_group_database():
    import grp

    import rocmseat.cli.systemd as cli_systemd

    present = grp.getgrgid(0).gr_name
    assert cli_systemd._missing_groups((present, "no-such-group-rocmseat")) == [
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
    assert result.exit_code == 2
    assert result.stderr.startswith(
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
    launch = [str(bin_), "launch", str(seat_file), "--replica", "r0", "--state-dir", str(state)]
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
    from rocmseat.seat.load import load_seat
    from rocmseat.seat.placement import resolve

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
    (rocmseat.cache.envclass.classify_env, applied when the seat loads): both refuse it with
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
