"""Hostile seat files (issue 11): every defect of the seat room, each with the input that showed it.

Control characters in any seat string, a host that sends probes elsewhere, non-finite and absurd
numbers, TOML dates in `[drafter] extra`, nesting that made tomllib recurse to death, empty and
root paths, seat files that are FIFOs or devices: each is one located line, exit 2, before
anything is touched. `dumps` (a small TOML writer) is shared with test_hostile_battery.py.
"""

# ruff: noqa: E501  (tables of hostile input read best one case per line)

from __future__ import annotations

import datetime as dt
import math
import multiprocessing
import os
import re
import socket
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.load import load_seat, parse_seat
from rocmseat.tomllocate import format_loc
from tests.conftest import REPO, CliResult

DEMO = REPO / "launchers" / "demo-cpu.toml"
R9700 = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
X99 = REPO / "tests" / "fixtures" / "sysfs" / "x99-r9700"
CTX = multiprocessing.get_context("fork")
# C0, DEL, C1 and the two Unicode line separators: what the tests expect refused (written out
# here, not imported: a test must not share the rule it checks)
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# ----- a small TOML writer (tomllib reads; the stdlib writes none) ------------------------------
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif CONTROL_CHARS.match(char):
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def dumps(doc: dict[str, Any]) -> str:
    """TOML text of `doc`: top-level tables as [table], lists of tables as [[name]], deeper
    tables inline."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in doc.items()
             if not isinstance(v, dict) and not _is_table_list(v)]
    for name, value in doc.items():
        if isinstance(value, dict):
            lines += ["", f"[{_key(name)}]"]
            lines += [f"{_key(k)} = {_value(v)}" for k, v in value.items()]
        elif _is_table_list(value):
            for item in value:
                lines += ["", f"[[{_key(name)}]]"]
                lines += [f"{_key(k)} = {_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def base_doc(tmp_path: Path, source: Path = DEMO, python: Path | None = None) -> dict[str, Any]:
    """A shipped seat as a document, its cache and state under tmp_path."""
    doc = tomllib.loads(source.read_text())
    doc["cache_root"] = str(tmp_path / "cache")
    doc["state_dir"] = str(tmp_path / "state")
    if python is not None:
        doc["engine"]["python"] = str(python)
    doc.setdefault("watch", {})
    return doc


def set_at(doc: Any, loc: tuple[str | int, ...], value: Any) -> None:
    for part in loc[:-1]:
        if isinstance(part, str) and isinstance(doc, dict):
            doc = doc.setdefault(part, {})
        else:
            doc = doc[part]
    doc[loc[-1]] = value


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "launchers" / "hostile.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_seat(path)
    message = str(info.value)
    assert "\n" not in message and not CONTROL_CHARS.search(message), repr(message)
    assert message.startswith(f"{path}"), message
    return message.removeprefix(str(path))


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.split("\n"), 1) if needle in line)


# ----- the reported exploit -----------------------------------------------------------------
EXPLOIT = 'cache_root = "/srv/x\\u0000ExecStartPre=+/srv/evil.sh\\u0000#"'


def exploit_text() -> str:
    text = DEMO.read_text()
    assert 'cache_root = "/var/tmp/rocmseat-demo/cache"' in text
    return text.replace('cache_root = "/var/tmp/rocmseat-demo/cache"', EXPLOIT)


def test_nul_in_cache_root_is_refused_at_load(tmp_path: Path) -> None:
    text = exploit_text()
    line = line_of(text, "cache_root")
    assert refusal(tmp_path, text) == (
        f":{line}: key 'cache_root': holds the control character U+0000 (NUL) at offset 6: "
        "control characters are refused in seat strings; a NUL, CR or LF would end a line of a "
        "systemd unit"
    )


def test_render_refuses_the_exploit_and_writes_no_unit(
    tmp_path: Path, rocmseat_cli: Callable[..., CliResult]
) -> None:
    seat = tmp_path / "evil.toml"
    seat.write_text(exploit_text())
    out = tmp_path / "units"
    result = rocmseat_cli("systemd", "render", str(seat), "--out", str(out),
                          "--rocmseat-bin", "/usr/bin/rocmseat", "--state-dir", str(tmp_path / "s"))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "key 'cache_root': holds the control character U+0000" in result.stderr
    assert not out.exists()


# ----- control characters in every string that reaches a unit, an argv, an env or a path -----
STRING_KEYS: list[tuple[str | int, ...]] = [
    ("name",), ("cache_root",), ("state_dir",),
    ("engine", "command", 0), ("engine", "command", 2), ("engine", "python"), ("engine", "host"),
    ("engine", "model_flag"), ("engine", "image_digest"),
    ("model", "path"), ("model", "served_name"),
    ("drafter", "method"), ("drafter", "path"), ("drafter", "extra", "note"),
    ("serve", "extra_args", 0), ("serve", "dtype"), ("serve", "quantization"),
    ("replicas", "names", 0), ("env", "VLLM_CPU_KVCACHE_SPACE"),
    ("env_classes", "key", 0), ("env_classes", "neutral", 0),
    ("preflight", "profile"), ("expect_log", 0, "pattern"),
    ("watch", "webhook_url"), ("watch", "command_hook", 0), ("watch", "command_hook", 1),
    ("watch", "exporter_listen"),
]
CONTROLS = ["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\x9f", "\u2028", "\u2029"]


def _with_every_key(doc: dict[str, Any]) -> dict[str, Any]:
    doc["serve"]["extra_args"] = ["--enable-prefix-caching"]
    doc["serve"]["quantization"] = "fp8"
    doc["engine"]["image_digest"] = "sha256:" + "a" * 64
    doc["drafter"]["extra"] = {"note": "x"}
    doc["replicas"]["names"] = ["r0"]
    doc["env_classes"] = {"key": ["RADIANCE_*"], "neutral": ["MY_LOG_*"]}
    doc["preflight"]["profile"] = "/etc/rocmseat/profile.toml"
    doc["expect_log"] = [{"pattern": "speculative"}]
    doc["watch"].update(webhook_url="http://127.0.0.1:9093/api/v2/alerts",
                        command_hook=["/usr/local/bin/page", "--loud"],
                        exporter_listen="127.0.0.1:9464")
    return doc


def test_every_key_accepts_its_clean_value(tmp_path: Path) -> None:
    path = tmp_path / "clean.toml"
    path.write_text(dumps(_with_every_key(base_doc(tmp_path))))
    seat = load_seat(path)
    assert seat.watch.exporter_listen == "127.0.0.1:9464" and seat.env_classes.neutral == ("MY_LOG_*",)


@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("loc", STRING_KEYS, ids=format_loc)
def test_control_character_refused(tmp_path: Path, loc: tuple[str | int, ...], char: str) -> None:
    doc = _with_every_key(base_doc(tmp_path))
    holder: Any = doc
    for part in loc[:-1]:
        holder = holder[part]
    set_at(doc, loc, holder[loc[-1]][:2] + char + holder[loc[-1]][2:])
    text = dumps(doc)
    message = refusal(tmp_path, text)
    assert re.fullmatch(
        rf":\d+: key '{re.escape(format_loc(loc))}': holds the control character U\+{ord(char):04X}.*",
        message,
    ), message


@pytest.mark.parametrize(("where", "key"), [("env", "A\x00B"), ("env", "A\nB"), ("drafter.extra", "x\ry"),
                                            ("serve", "a\u2028b")])
def test_control_character_in_a_key_name(tmp_path: Path, where: str, key: str) -> None:
    doc = base_doc(tmp_path)
    holder = doc
    for part in where.split("."):
        holder = holder.setdefault(part, {})
    holder[key] = "1"
    message = refusal(tmp_path, dumps(doc))
    assert f"the key name holds the control character U+{ord(key[1]):04X}" in message, message
    assert key not in message  # shown escaped


def test_canary_prompt_may_hold_tab_and_newline_only(tmp_path: Path) -> None:
    doc = base_doc(tmp_path)
    doc["readiness"]["canary_prompt"] = "Say\thello\nplease"
    path = tmp_path / "ok.toml"
    path.write_text(dumps(doc))
    assert load_seat(path).readiness.canary_prompt == "Say\thello\nplease"
    for char in ("\x00", "\r", "\x1b", "\x85"):
        doc["readiness"]["canary_prompt"] = f"a{char}b"
        message = refusal(tmp_path, dumps(doc))
        assert f"key 'readiness.canary_prompt': holds the control character U+{ord(char):04X}" in message
        assert "(TAB and LF are allowed here)" in message


def test_expanded_home_with_a_control_character(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`~` expands through $HOME, itself hostile input."""
    monkeypatch.setenv("HOME", "/home/x\nExecStartPre=+/evil")
    doc = base_doc(tmp_path)
    doc["cache_root"] = "~/cache"
    message = refusal(tmp_path, dumps(doc))
    assert "key 'cache_root': the resolved path '/home/x\\nExecStartPre=+/evil/cache' holds the control character U+000A (LF)" in message


# ----- engine.host --------------------------------------------------------------------------
BAD_HOSTS = ["127.0.0.1@evil.example/#", "evil.example/metrics", "[::1]", "", " ", "a b", "127.1",
             "1.2.3.999", "fe80::1%eth0", "http://x", "x:80", "-x", "x-", "a..b", "under_score",
             "a" * 64 + ".example", "é.example"]
GOOD_HOSTS = ["127.0.0.1", "localhost", "0.0.0.0", "::", "::1", "node-3.cluster.local", "10.1.2.3",
              "fd00::1", "example.com."]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_bad_host_refused(tmp_path: Path, host: str) -> None:
    doc = base_doc(tmp_path)
    doc["engine"]["host"] = host
    text = dumps(doc)
    assert refusal(tmp_path, text).startswith(f":{line_of(text, 'host = ')}: key 'engine.host': ")


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_good_host_accepted(tmp_path: Path, host: str) -> None:
    doc = base_doc(tmp_path)
    doc["engine"]["host"] = host
    path = tmp_path / "ok.toml"
    path.write_text(dumps(doc))
    assert load_seat(path).engine.host == host


@pytest.mark.parametrize(("listen", "why"), [
    ("127.0.0.1:²", "is not HOST:PORT"),  # str.isdigit() is true for '²'; int('²') raised
    ("127.0.0.1:99999", "port 99999 is not in 1..65535"),
    ("127.0.0.1:0", "port 0 is not in 1..65535"),
    ("::1:9464", "is not HOST:PORT"),
    ("[x]:9464", "is not an IPv6 address"),
    ("127.0.0.1@evil.example:9464", "is not a host name or an IP address"),
])
def test_bad_exporter_listen(tmp_path: Path, listen: str, why: str) -> None:
    doc = base_doc(tmp_path)
    doc["watch"]["exporter_listen"] = listen
    message = refusal(tmp_path, dumps(doc))
    assert "key 'watch.exporter_listen': " in message and why in message, message


# ----- numbers: finite, in documented ranges ------------------------------------------------
NUMBERS: list[tuple[tuple[str, ...], Any, str]] = [
    (("readiness", "timeout_s"), math.inf, "inf is not a finite number"),
    (("readiness", "timeout_s"), -math.inf, "-inf is not a finite number"),
    (("readiness", "timeout_s"), math.nan, "nan is not a finite number"),
    (("readiness", "timeout_s"), 86401, "Input should be less than or equal to 86400"),
    (("readiness", "timeout_s"), 1e300, "Input should be less than or equal to 86400"),
    (("watch", "interval_s"), 1e-300, "Input should be greater than or equal to 0.05"),
    (("watch", "interval_s"), 3601, "Input should be less than or equal to 3600"),
    (("watch", "interval_s"), math.nan, "nan is not a finite number"),
    (("watch", "expected_acceptance_length"), math.inf, "inf is not a finite number"),
    (("watch", "expected_acceptance_length"), 0.5, "Input should be greater than or equal to 1"),
    (("watch", "expected_acceptance_length"), 4.5, "4.5 is above 1 + num_speculative_tokens = 4"),
    (("drafter", "num_speculative_tokens"), 65, "Input should be less than or equal to 64"),
    (("tp",), 65, "Input should be less than or equal to 64"),
    (("serve", "max_model_len"), 2**31, "Input should be less than or equal to 2147483647"),
    (("serve", "max_num_seqs"), 65537, "Input should be less than or equal to 65536"),
    (("serve", "gpu_memory_utilization"), math.nan, "nan is not a finite number"),
    (("readiness", "canary_max_tokens"), 4097, "Input should be less than or equal to 4096"),
    (("serve", "port_base"), 2**63, "is an integer outside the 64-bit range"),
    (("drafter", "extra", "draft_tensor_parallel_size"), 2**64, "is an integer outside the 64-bit range"),
    (("drafter", "extra", "scale"), math.inf, "inf is not a finite number"),
    (("drafter", "extra", "deep"), {"a": [1.0, math.nan]}, "nan is not a finite number"),
]


@pytest.mark.parametrize(("loc", "value", "why"), NUMBERS, ids=[f"{format_loc(n[0])}={n[1]!r}" for n in NUMBERS])
def test_number_out_of_range(tmp_path: Path, loc: tuple[str, ...], value: Any, why: str) -> None:
    doc = base_doc(tmp_path)
    set_at(doc, loc, value)
    message = refusal(tmp_path, dumps(doc))
    assert f" key '{format_loc(loc)}" in message and why in message, message


def test_expected_acceptance_length_needs_a_drafter(tmp_path: Path) -> None:
    doc = base_doc(tmp_path)
    del doc["drafter"]
    doc["watch"]["expected_acceptance_length"] = 2.0
    assert "key 'watch.expected_acceptance_length': the seat has no [drafter]" in refusal(tmp_path, dumps(doc))


@pytest.mark.parametrize(("raw", "why"), [
    # tomllib: ValueError, not TOMLDecodeError; the loader names the key (rocmseat.tomlio)
    ("9" * 5000, "invalid TOML: key 'watch.interval_s': a number with thousands of digits"),
    ("0x" + "f" * 5000, "key 'watch.interval_s': is an integer outside the 64-bit range"),
    ("1" + "0" * 400 + ".0", "key 'watch.interval_s': inf is not a finite number"),  # overflows
])
def test_numbers_tomllib_cannot_represent(tmp_path: Path, raw: str, why: str) -> None:
    text = DEMO.read_text().replace("interval_s = 5", f"interval_s = {raw}")
    assert refusal(tmp_path, text).startswith(f":{line_of(text, 'interval_s')}: {why}")


# ----- TOML dates: no key takes one; [drafter] extra is JSON ------------------------------
@pytest.mark.parametrize("value", ["1979-05-27T07:32:00Z", "1979-05-27T07:32:00", "1979-05-27", "07:32:00", "[1979-05-27]", "{ at = 07:32:00 }"])
def test_datetime_in_drafter_extra(tmp_path: Path, value: str) -> None:
    text = DEMO.read_text().replace("num_speculative_tokens = 3", f"num_speculative_tokens = 3\nextra = {{ when = {value} }}")
    message = refusal(tmp_path, text)
    assert message.startswith(f":{line_of(text, 'extra = ')}: key 'drafter.extra.when"), message
    assert re.search(r"is a TOML (datetime|date|time): no seat key takes one", message)


def test_datetime_anywhere(tmp_path: Path) -> None:
    text = DEMO.read_text().replace('dtype = "bfloat16"', "dtype = 1979-05-27")
    assert refusal(tmp_path, text).startswith(f":{line_of(text, 'dtype')}: key 'serve.dtype': is a TOML date")


# ----- nesting ------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "line_key"), [
    ("[" * 5000 + "]" * 5000, "DEEP"),
    ("{ a = " * 5000 + "1" + " }" * 5000, "DEEP"),
    ("[" * 17 + "]" * 17, "DEEP"),
    ("[\n" * 3000 + "]\n" * 3000, None),
])
def test_deep_nesting_is_one_line(tmp_path: Path, value: str, line_key: str | None) -> None:
    text = DEMO.read_text().replace('VLLM_CPU_KVCACHE_SPACE = "1"', f'VLLM_CPU_KVCACHE_SPACE = "1"\nDEEP = {value}')
    message = refusal(tmp_path, text)
    assert "nested more than 16 levels deep" in message, message
    if line_key is not None:
        assert message.startswith(f":{line_of(text, line_key)}:")


def test_deep_dotted_keys(tmp_path: Path) -> None:
    """A dotted key builds nesting without brackets: tomllib is fine, every later reader recursed."""
    dotted = "extra." + ".".join(["a"] * 5000) + " = 1"
    text = DEMO.read_text().replace("num_speculative_tokens = 3", f"num_speculative_tokens = 3\n{dotted}")
    message = refusal(tmp_path, text)
    assert message.startswith(f":{line_of(text, 'extra.a.a')}: key 'drafter.extra.a.a."), message
    assert "nested more than 16 levels deep" in message


def test_nesting_within_the_limit_is_fine(tmp_path: Path) -> None:
    doc = base_doc(tmp_path)
    doc["drafter"]["extra"] = {"a": {"b": [[1, [2, {"c": "d"}]]]}}
    path = tmp_path / "ok.toml"
    path.write_text(dumps(doc))
    assert load_seat(path).drafter.extra == {"a": {"b": [[1, [2, {"c": "d"}]]]}}  # type: ignore[union-attr]


def test_brackets_in_strings_and_comments_do_not_count(tmp_path: Path) -> None:
    text = DEMO.read_text().replace('canary_prompt = "Hello"', 'canary_prompt = "' + "[" * 40 + '"  # ' + "{" * 40)
    text = text.replace('served_name = "demo"', "served_name = '''" + "[{" * 40 + "'''")
    path = tmp_path / "ok.toml"
    path.write_text(text)
    assert load_seat(path).readiness.canary_prompt == "[" * 40


# ----- paths --------------------------------------------------------------------------------
@pytest.mark.parametrize(("loc", "value", "why"), [
    (("cache_root",), "", "must not be empty"),
    (("cache_root",), "   ", "must not be empty"),
    (("state_dir",), "", "must not be empty"),
    (("engine", "python"), "", "must not be empty"),
    (("model", "path"), "", "must not be empty"),
    (("drafter", "path"), "", "must not be empty"),
    (("preflight", "profile"), "", "must not be empty"),
    (("cache_root",), "/", "must not be the file-system root '/'"),
    (("state_dir",), "/../..", "must not be the file-system root '/'"),
    # review of issue 10: a system tree is never a cache root or a state dir (the units make
    # it writable; launch renames and prunes below it)
    (("cache_root",), "/etc", "is in the system tree /etc"),
    (("cache_root",), "/etc/rocmseat/cache", "is in the system tree /etc"),
    (("cache_root",), "/proc/self/cwd", "is in the system tree /proc"),
    (("cache_root",), "/sys/kernel", "is in the system tree /sys"),
    (("cache_root",), "/dev/shm/cache", "is in the system tree /dev"),
    (("cache_root",), "/boot/x", "is in the system tree /boot"),
    (("cache_root",), "/usr/local/cache", "is in the system tree /usr"),
    (("cache_root",), "/var/../etc/x", "is in the system tree /etc"),
    (("state_dir",), "/usr/lib/rocmseat", "is in the system tree /usr"),
    (("cache_root",), "~nosuchuser-rocmseat/cache", "cannot expand '~' (no such user)"),
    (("cache_root",), "/" + "x" * 256, "is longer than 255 bytes"),
    (("model", "path"), "/a" + "/é" * 1400, "bytes long; Linux allows 4,095"),  # 2,802 characters
])
def test_bad_path(tmp_path: Path, loc: tuple[str, ...], value: str, why: str) -> None:
    doc = base_doc(tmp_path)
    set_at(doc, loc, value)
    message = refusal(tmp_path, dumps(doc))
    assert f"key '{format_loc(loc)}': " in message and why in message, message


@pytest.mark.parametrize("value", ["/etcetera/cache", "/var/cache/rocmseat", "/srv/usr",
                                   "/sysroot/cache"])
def test_a_path_beside_a_system_tree_is_fine(tmp_path: Path, value: str) -> None:
    doc = base_doc(tmp_path)
    set_at(doc, ("cache_root",), value)
    path = tmp_path / "ok.toml"
    path.write_text(dumps(doc))
    assert str(load_seat(path).cache_root) == value


def test_empty_cache_root_is_not_the_seat_directory(tmp_path: Path, rocmseat_cli: Callable[..., CliResult]) -> None:
    """Before: `cache_root = ""` rendered ReadWritePaths= with the seat file's directory."""
    text = DEMO.read_text().replace('cache_root = "/var/tmp/rocmseat-demo/cache"', 'cache_root = ""')
    seat = tmp_path / "empty.toml"
    seat.write_text(text)
    out = tmp_path / "units"
    result = rocmseat_cli("systemd", "render", str(seat), "--out", str(out), "--rocmseat-bin",
                          "/usr/bin/rocmseat", "--state-dir", str(tmp_path / "s"))
    assert result.exit_code == 2
    assert f"{seat}:{line_of(text, 'cache_root')}: key 'cache_root': must not be empty" in result.stderr
    assert not out.exists()


# ----- other strings that become engine arguments ---------------------------------------------
@pytest.mark.parametrize(("loc", "value", "why"), [
    (("engine", "model_flag"), "model", "is not '' (positional) or a flag"),
    (("engine", "model_flag"), "--model=x", "is not '' (positional) or a flag"),
    (("engine", "command"), [""], "needs a program"),
    (("engine", "command"), [], "at least 1 item"),
    (("watch", "command_hook"), [" "], "needs a program"),
    (("model", "served_name"), "", "must be a non-empty name"),
    (("model", "served_name"), "--trust-remote-code", "does not start with '-'"),
    (("serve", "dtype"), "--trust-remote-code", "is not a dtype or quantization name"),
    (("serve", "quantization"), "a b", "is not a dtype or quantization name"),
    (("replicas", "names"), ["r" * 33], "at most 32 characters"),
    (("name",), "a" * 65, "String should have at most 64 characters"),
    (("env_classes", "key"), [""], "an empty pattern classifies nothing"),
    (("expect_log",), [{"pattern": "(" * 600 + ")" * 600}], "not a usable Python regex"),
    (("model", "served_name"), "x" * 4097, "is 4,097 characters long; the limit is 4,096"),
    (("serve", "extra_args"), ["x" * 65537], "is 65,537 characters long; the limit is 65,536"),
    (("serve", "extra_args"), ["--x"] * 4097, "has 4,097 entries; the limit is 4,096"),
    (("serve", "extra_args"), ["-cc", "[" * 20000], "brackets nested more than 16 levels deep"),
    (("serve", "extra_args"), ['--speculative-config={"a": ' + "[" * 17 + "]" * 17 + "}"],
     "brackets nested more than 16 levels deep"),
])
def test_bad_engine_strings(tmp_path: Path, loc: tuple[str, ...], value: Any, why: str) -> None:
    doc = base_doc(tmp_path)
    set_at(doc, loc, value)
    message = refusal(tmp_path, dumps(doc))
    assert f"key '{format_loc(loc)}" in message and why in message, message


def test_deep_json_argument_is_one_line_for_every_command(
    tmp_path: Path, rocmseat_cli: Callable[..., CliResult], fake_engine_python: Path
) -> None:
    """Before: json.loads of `-cc [[[[...` recursed to death in the loader: exit 3 everywhere."""
    doc = base_doc(tmp_path, python=fake_engine_python)
    doc["serve"]["extra_args"] = ["-cc", "[" * 20000]
    seat = tmp_path / "seat.toml"
    seat.write_text(dumps(doc))
    for args in (["key", str(seat)], ["launch", str(seat), "--dry-run"],
                 ["systemd", "render", str(seat), "--out", str(tmp_path / "u"), "--rocmseat-bin",
                  "/usr/bin/rocmseat", "--state-dir", str(tmp_path / "s")]):
        result = rocmseat_cli(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert "key 'serve.extra_args[1]': brackets nested more than 16 levels deep" in result.stderr


def test_unclassified_env_is_refused_by_every_command(
    tmp_path: Path, rocmseat_cli: Callable[..., CliResult], fake_engine_python: Path
) -> None:
    """`systemd render` accepted an [env] variable that `key` refused: one rule, at load."""
    doc = base_doc(tmp_path, python=fake_engine_python)
    doc["env"]["FOO_BAR"] = "1"
    text = dumps(doc)
    seat = tmp_path / "seat.toml"
    seat.write_text(text)
    line = line_of(text, "FOO_BAR")
    expected = f"{seat}:{line}: key 'env.FOO_BAR': environment variable 'FOO_BAR' is not classified"
    for args in (["key", str(seat)], ["launch", str(seat), "--dry-run"],
                 ["systemd", "render", str(seat), "--out", str(tmp_path / "u"), "--rocmseat-bin",
                  "/usr/bin/rocmseat", "--state-dir", str(tmp_path / "s")]):
        result = rocmseat_cli(*args)
        assert result.exit_code == 2 and expected in result.stderr, (args, result.stderr)
    assert not (tmp_path / "u").exists()


def test_nul_in_env_refused_before_the_cache_is_prepared(
    tmp_path: Path, rocmseat_cli: Callable[..., CliResult], fake_engine_python: Path
) -> None:
    """Before: launch prepared (created) the cache, then execve failed on the NUL: exit 3."""
    from tests.cache.builders import write_model

    doc = base_doc(tmp_path, python=fake_engine_python)
    doc["model"]["path"] = str(write_model(tmp_path / "models" / "target", shards=1))
    doc["drafter"]["path"] = str(write_model(tmp_path / "models" / "drafter", shards=1))
    doc["env"]["VLLM_CPU_KVCACHE_SPACE"] = "1\x00"
    seat = tmp_path / "seat.toml"
    seat.write_text(dumps(doc))
    result = rocmseat_cli("launch", str(seat), "--replica", "r0", "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2, result.stderr
    assert "key 'env.VLLM_CPU_KVCACHE_SPACE': holds the control character U+0000 (NUL)" in result.stderr
    assert not (tmp_path / "cache").exists()


# ----- the seat file itself: regular files only, bounded ------------------------------------
def _load_in_child(path: str, queue: Any) -> None:
    import resource

    # a regression reading /dev/zero must fail this child, not take the host's memory
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
    try:
        load_seat(Path(path))
        queue.put("loaded")
    except ConfigError as exc:
        queue.put(str(exc))
    except BaseException as exc:  # the test reports it
        queue.put(f"CRASH {type(exc).__name__}: {exc}")


def _load_bounded(path: Path) -> str:
    """load_seat in a child with a deadline: a FIFO blocked open() forever, /dev/zero read until
    memory ran out."""
    queue = CTX.Queue()
    child = CTX.Process(target=_load_in_child, args=(str(path), queue))
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
        child.join(10)
        pytest.fail(f"load_seat({path}) still running after 20 s")
    return str(queue.get(timeout=5))


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "seat-fifo.toml"
    os.mkfifo(path)
    return path


def _zero_link(tmp_path: Path) -> Path:
    path = tmp_path / "zero.toml"
    path.symlink_to("/dev/zero")
    return path


def _huge(tmp_path: Path) -> Path:
    path = tmp_path / "huge.toml"
    path.write_text(DEMO.read_text() + "#" + "x" * (2 << 20) + "\n")
    return path


def _latin1(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.toml"
    path.write_bytes(DEMO.read_bytes().replace(b'"demo"', b'"d\xe9mo"'))
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "seat.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    return path


@pytest.mark.parametrize(("make", "why"), [
    (_fifo, "cannot read the seat file: is a FIFO, not a regular file"),
    (lambda tmp: Path("/dev/zero"), "cannot read the seat file: is a character device, not a regular file"),
    (_zero_link, "cannot read the seat file: is a character device, not a regular file"),
    (lambda tmp: tmp, "cannot read the seat file: is a directory"),
    (_huge, "cannot read the seat file: is 2,"),
    (_latin1, "not UTF-8 text (byte"),
    (_socket, "cannot read the seat file: "),
    (lambda tmp: tmp / "missing.toml", "cannot read the seat file: No such file or directory"),
], ids=["fifo", "dev-zero", "link-to-dev-zero", "directory", "huge", "latin1", "socket", "missing"])
def test_seat_file_kinds(tmp_path: Path, make: Callable[[Path], Path], why: str) -> None:
    path = make(tmp_path)
    message = _load_bounded(path)
    assert re.match(rf"{re.escape(str(path))}(:\d+)?: {re.escape(why)}", message), message
    assert "\n" not in message


def test_control_characters_in_the_seat_path_are_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / "a\nb.toml"
    path.write_text("name = 1\n")
    with pytest.raises(ConfigError) as info:
        load_seat(path)
    assert "\n" not in str(info.value) and "a\\nb.toml" in str(info.value)


def test_parse_seat_is_the_same_gate() -> None:
    """parse_seat (text already read) applies every document rule too."""
    with pytest.raises(ConfigError, match=r"x\.toml:1: key 'name': holds the control character U\+0000"):
        parse_seat('name = "a\\u0000"\n', Path("x.toml"))
