"""`preflight --format npd`, and the NPD custom plugin config checked against NPD's own rules
(kubernetes/node-problem-detector pkg/custompluginmonitor/types/config.go: ApplyConfiguration and
Validate; plugin/plugin.go: output cut at max_output_length bytes, exit 0 OK, 1 NonOK, else
Unknown)."""

from __future__ import annotations

import json
import re
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.findings import Finding, Severity
from rocmseat.fleet.npd import MAX_OUTPUT_BYTES, fit, npd_line
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

NPD_CONFIG = REPO / "deploy" / "npd" / "rocmseat-plugin-monitor.json"
DAEMONSET = REPO / "deploy" / "kubernetes" / "node-checks-daemonset.yaml"
DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"
X99 = SYSFS_FIXTURES / "x99-r9700"


@pytest.fixture
def npd(rocmseat_cli, tmp_path):
    def run(root, *args, state=None):
        return rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                            str(state or tmp_path / "state"), "--format", "npd", *args)

    return run


def test_live_npd_line(npd):
    result = npd(DEGRADED)
    assert (result.exit_code, result.stdout) == (
        1, "FAIL pcie.link.degraded 0000:89:00.0 +1 more\n")
    result = npd(X99)
    assert (result.exit_code, result.stdout) == (0, "OK: 4 GPUs, 18 checks\n")


@pytest.mark.parametrize(
    ("only", "code", "line"),
    [
        ((), 1, r"FAIL pcie\.link\.degraded 0000:89:00\.0 \+1 more"),
        (("pcie",), 1, r"FAIL pcie\.link\.degraded 0000:89:00\.0"),
        (("aer",), 1, r"FAIL aer\.badtlp 0000:80:02\.0"),
        (("numa",), 0, r"OK \[numa\]: 4 GPUs, 6 checks"),
        (("hip",), 2, r"UNKNOWN: hip was not in the cached run \(add --hip to the periodic run\)"),
    ],
)
def test_cached_answers_per_family(npd, only, code, line):
    npd(DEGRADED)  # the periodic full run
    args = [a for family in only for a in ("--only", family)]
    result = npd(DEGRADED, "--cached", *args)
    assert result.exit_code == code
    assert re.fullmatch(line + "\n", result.stdout), result.stdout
    assert len(result.stdout.rstrip("\n").encode()) <= MAX_OUTPUT_BYTES


def test_a_live_run_that_cannot_check_still_answers_on_stdout(npd):
    result = npd(SYSFS_FIXTURES / "no-amdgpu")
    assert result.exit_code == 2
    assert result.stdout.startswith("UNKNOWN: no amdgpu device under ")
    assert len(result.stdout.rstrip("\n").encode()) <= MAX_OUTPUT_BYTES
    assert result.stderr.startswith("rocmseat: error: no amdgpu device under ")


def test_no_cache_and_stale_cache_are_unknown_exit_2(npd, tmp_path):
    result = npd(X99, "--cached")
    assert (result.exit_code, result.stdout) == (
        2, "UNKNOWN: no cached verdict (run a full rocmseat preflight)\n")
    npd(X99)
    verdict = tmp_path / "state" / "preflight" / "verdict.json"
    doc = json.loads(verdict.read_text())
    doc["written_at_unix_s"] = time.time() - 4000
    verdict.write_text(json.dumps(doc))
    result = npd(X99, "--cached", "--max-age", "900")
    assert result.exit_code == 2
    assert result.stdout == "UNKNOWN: cached verdict is older than 900s\n"


def test_cached_answer_reads_no_sysfs(npd, copy_tree, tmp_path):
    # it answers from the cache only: the tree may be gone (NPD's container need not read /sys)
    root = copy_tree("x99-r9700")
    npd(root)
    import shutil

    shutil.rmtree(root / "devices")
    result = npd(root, "--cached")
    assert (result.exit_code, result.stdout) == (0, "OK: 4 GPUs, 18 checks\n")


@pytest.mark.parametrize(
    "args",
    [["--pair", "05:00.0,09:00.0"], ["--textfile", "/tmp/x"], ["--sample", "1"], ["--hip"]],
)
def test_cached_refuses_options_of_a_live_run(npd, args):
    result = npd(X99, "--cached", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert "--cached answers from the last full run's verdict: it takes no" in result.stderr


def test_cached_without_format_npd_is_a_usage_error(rocmseat_cli, tmp_path):
    result = rocmseat_cli("preflight", "--sysfs-root", str(X99), "--state-dir", str(tmp_path),
                          "--cached")
    assert result.exit_code == 2
    assert "--cached needs --format npd" in result.stderr


def test_line_is_at_most_80_bytes_of_printable_ascii():
    subject = "0000:89:00.0+" + "é" * 100 + "\x1b[31m"
    findings = [Finding("pcie.link.degraded", Severity.FAIL, subject, "m")] * 3
    line, code = npd_line(findings, gpus=4)
    assert code == 1
    assert len(line.encode()) <= MAX_OUTPUT_BYTES and line.isascii() and line.isprintable()
    assert fit("x" * 200) == "x" * 80


def test_strict_fails_on_warnings_and_unknown_wins_over_ok():
    warn = [Finding("pcie.dpm.below_link", Severity.WARN, "0000:05:00.0", "m")]
    assert npd_line(warn, gpus=1) == ("OK: 1 GPUs, 1 checks, 1 warn", 0)
    assert npd_line(warn, gpus=1, strict=True) == ("FAIL pcie.dpm.below_link 0000:05:00.0", 1)
    unknown = [*warn, Finding("aer.unknown", Severity.UNKNOWN, "0000:05:00.0", "m")]
    assert npd_line(unknown, gpus=1) == ("UNKNOWN aer.unknown 0000:05:00.0", 2)
    # an inventory finding counts for every family: a pcie rule never says OK over it
    card = [Finding("inventory.card", Severity.UNKNOWN, "card4", "m")]
    assert npd_line(card, gpus=3, families={"pcie"})[1] == 2


# ----- the NPD custom plugin config ------------------------------------------------------------
_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_s(text):
    """Go's time.ParseDuration for the forms NPD configs use ("5s", "1m30s", "300ms")."""
    if not isinstance(text, str) or not _GO_DURATION.fullmatch(text):
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _UNIT_S[u] for n, u in re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms"
                                                               r"|s|m|h)", text))


def validate_npd_config(config):
    """NPD's ApplyConfiguration + Validate, plus the documented limits rocmseat relies on."""
    problems = []
    if config.get("plugin") != "custom":
        problems.append('plugin must be "custom"')
    if not config.get("source"):
        problems.append("source is empty")
    glob = config.get("pluginConfig", {})
    timeout = go_duration_s(glob.get("timeout", "5s"))
    interval = go_duration_s(glob.get("invoke_interval", "30s"))
    if interval <= 0:
        problems.append("invoke_interval must be > 0")
    max_output = glob.get("max_output_length", 80)
    if not isinstance(max_output, int) or not 0 < max_output <= 80:
        problems.append("max_output_length must be 1..80 (rocmseat's line is at most 80 bytes)")
    conditions = {c["type"]: c for c in config.get("conditions", [])}
    if len(conditions) != len(config.get("conditions", [])):
        problems.append("condition types repeat")
    for cond in conditions.values():
        if not cond.get("reason") or not cond.get("message"):
            problems.append(f"condition {cond['type']} lacks its healthy reason or message")
    for rule in config.get("rules", []):
        name = rule.get("reason")
        if rule.get("type") not in ("temporary", "permanent"):
            problems.append(f"rule {name}: type must be temporary or permanent")
        if "timeout" in rule and go_duration_s(rule["timeout"]) > timeout:
            problems.append(f"rule {name}: timeout above the global one")
        if "invoke_interval" in rule and go_duration_s(rule["invoke_interval"]) <= 0:
            problems.append(f"rule {name}: invoke_interval must be > 0")
        if rule.get("type") == "permanent" and rule.get("condition") not in conditions:
            problems.append(f"Permanent problem {rule.get('condition')} does not have preset "
                            "default condition.")
        if not str(rule.get("path", "")).startswith("/"):
            problems.append(f"rule {name}: path must be absolute")
    return problems


def test_npd_config_passes_npds_rules():
    config = json.loads(NPD_CONFIG.read_text())
    assert validate_npd_config(config) == []
    assert {r["condition"] for r in config["rules"]} == {c["type"] for c in config["conditions"]}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda c: c.update(plugin="journald"), 'plugin must be "custom"'),
        (lambda c: c["rules"][0].update(timeout="6s"), "timeout above the global one"),
        (lambda c: c["rules"][0].update(condition="Nope"), "Permanent problem Nope does not"),
        (lambda c: c["pluginConfig"].update(invoke_interval="0s"), "invoke_interval must be > 0"),
        (lambda c: c["pluginConfig"].update(max_output_length=200), "max_output_length"),
    ],
)
def test_the_validator_catches_what_npd_refuses(change, problem):
    config = json.loads(NPD_CONFIG.read_text())
    change(config)
    assert any(problem in p for p in validate_npd_config(config)), validate_npd_config(config)


def test_the_daemonsets_configmap_is_the_same_config():
    docs = list(yaml.safe_load_all(DAEMONSET.read_text()))
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    embedded = json.loads(configmap["data"]["rocmseat-plugin-monitor.json"])
    assert embedded == json.loads(NPD_CONFIG.read_text())


@pytest.mark.parametrize("host", ["x99-r9700", "x99-r9700-degraded"])
def test_every_rule_runs_and_answers_as_npd_expects(rocmseat_cli, tmp_path, host):
    """Each rule's argv, run against the verdict a full run cached: exit 0/1/2, and a line that
    fits NPD's max_output_length, in well under the rule's timeout."""
    config = json.loads(NPD_CONFIG.read_text())
    root, state = SYSFS_FIXTURES / host, tmp_path / "state"
    rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir", str(state))
    answers = {}
    for rule in config["rules"]:
        assert rule["path"].endswith("/rocmseat")
        start = time.monotonic()
        result = rocmseat_cli(*rule["args"], "--sysfs-root", str(root), "--state-dir", str(state))
        elapsed = time.monotonic() - start
        line = result.stdout.rstrip("\n")
        assert result.exit_code in (0, 1, 2) and "\n" not in line
        assert len(line.encode()) <= config["pluginConfig"]["max_output_length"]
        assert elapsed < go_duration_s(rule["timeout"]), elapsed
        answers[rule["condition"]] = result.exit_code
    degraded = host.endswith("degraded")
    assert answers == {
        "RocmseatPCIeLinkDegraded": 1 if degraded else 0,
        "RocmseatAERErrors": 1 if degraded else 0,
        "RocmseatGPUPairing": 0,
        "RocmseatHIPIPCBroken": 2,  # this full run had no --hip: unknown, never "fine"
        # a fixture tree has no kernel log of its own: the events family did not run
        "RocmseatKernelEvents": 2,
    }


# ----- message stability -----------------------------------------------------------------------
# NPD updates a True condition, resets its transition time and emits an event whenever the
# plugin's message changes, if enable_message_change_based_condition_update is on
# (custom_plugin_monitor.go generateStatus, scenario 4): a line that changes while the verdict
# does not (an age, a clock value) floods the API server and defeats duration-based remediation.
AGES_S = ((10, 700), (1000, 5000), (-3600, -7200))  # fresh, stale, from the future


def message_stability_problems(config, run_rule, ages=AGES_S):
    """For every rule: the same verdict read at two ages gives the same line (else a problem).
    `run_rule(rule, age_s) -> line` runs the rule against the verdict dated `age_s` ago."""
    if not config.get("pluginConfig", {}).get("enable_message_change_based_condition_update"):
        return []
    problems = []
    for rule in config["rules"]:
        for first, second in ages:
            lines = (run_rule(rule, first), run_rule(rule, second))
            if lines[0] != lines[1]:
                problems.append(f"rule {rule['reason']}: the message changes with the verdict's "
                                f"age ({lines[0]!r} at {first}s, {lines[1]!r} at {second}s)")
    return problems


@pytest.fixture
def rule_runner(rocmseat_cli, tmp_path):
    """Runs a rule's argv against the verdict a real full run cached, re-dated `age_s` ago."""

    def prepare(host):
        root, state = SYSFS_FIXTURES / host, tmp_path / host
        rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir", str(state))
        path = state / "preflight" / "verdict.json"
        doc = json.loads(path.read_text())

        def run_rule(rule, age_s):
            path.write_text(json.dumps({**doc, "written_at_unix_s": time.time() - age_s}))
            result = rocmseat_cli(*rule["args"], "--sysfs-root", str(root),
                                  "--state-dir", str(state))
            return result.stdout

        return run_rule

    return prepare


@pytest.mark.parametrize("host", ["x99-r9700", "x99-r9700-degraded"])
def test_npd_config_messages_are_stable_for_a_stable_verdict(rule_runner, host):
    config = json.loads(NPD_CONFIG.read_text())
    # the flag stays on (a different failing subject updates the condition), so the lines must
    # not move with time
    assert config["pluginConfig"]["enable_message_change_based_condition_update"] is True
    assert message_stability_problems(config, rule_runner(host)) == []


def test_the_stability_check_catches_an_age_in_the_line(rule_runner):
    config = json.loads(NPD_CONFIG.read_text())
    run_rule = rule_runner("x99-r9700-degraded")

    def with_age(rule, age_s):  # what the line looked like before (issue 13, defect 13)
        return run_rule(rule, age_s).rstrip("\n") + f" ({age_s}s ago)\n"

    problems = message_stability_problems(config, with_age)
    assert len(problems) == len(config["rules"]) * len(AGES_S)
    assert "the message changes with the verdict's age" in problems[0]
    config["pluginConfig"]["enable_message_change_based_condition_update"] = False
    assert message_stability_problems(config, with_age) == []  # NPD ignores message changes


@pytest.mark.parametrize(
    ("host", "code", "line"),
    [
        # the node is fine but the run could not do its job: the line says so, as the code does
        ("x99-r9700", 2, "UNKNOWN: cannot write the textfile: Not a directory\n"),
        # a problem on the node outranks it (1): the line still names the problem
        ("x99-r9700-degraded", 1, "FAIL pcie.link.degraded 0000:89:00.0 +1 more\n"),
    ],
)
def test_npd_line_agrees_with_the_exit_code_when_the_textfile_fails(npd, tmp_path, host, code,
                                                                    line):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = npd(SYSFS_FIXTURES / host, "--textfile", str(blocker / "dir"))
    assert (result.exit_code, result.stdout) == (code, line)
    assert result.stderr == (f"rocmseat: error: {blocker / 'dir' / 'rocmseat_preflight.prom'}: "
                             "cannot write the textfile: Not a directory\n")


# --- issue 19: the line names the problem first and cuts paths, never the verdict -----------
def test_a_reason_that_starts_with_a_path_names_the_problem_first(rocmseat_cli, tmp_path):
    deep = tmp_path / ("d" * 40) / "etc" / "rocmseat" / "nope.toml"
    result = rocmseat_cli("preflight", "--sysfs-root", str(X99), "--state-dir", str(tmp_path),
                          "--format", "npd", "--cached", "--profile", str(deep))
    assert result.exit_code == 2
    assert result.stdout == (
        "UNKNOWN: cannot read the profile: No such file or directory (.../nope.toml)\n")


def test_a_long_sysfs_root_is_cut_not_the_reason(npd, copy_tree, tmp_path):
    npd(X99)
    other = copy_tree("x99-r9700")  # copy_tree puts it under tmp_path: a long path
    result = npd(other, "--cached")
    assert result.exit_code == 2
    assert result.stdout == "UNKNOWN: cached verdict is for another sysfs root (.../x99-r9700)\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("OK: 4 GPUs, 18 checks", "OK: 4 GPUs, 18 checks"),
        ("UNKNOWN: /a/b/c.toml:3: key 'x': not a number",
         "UNKNOWN: key 'x': not a number (/a/b/c.toml:3)"),
        ("UNKNOWN: no amdgpu device under /" + "p/" * 40 + "class/drm (found card0 ast)",
         "UNKNOWN: no amdgpu device under .../drm (found card0 ast)"),
        ("UNKNOWN: " + "word " * 30, "UNKNOWN:" + " word" * 14),
        ("FAIL pcie.link.degraded " + "0000:89:00.0+" * 8, "FAIL pcie.link.degraded "
         + ("0000:89:00.0+" * 5)[:56]),
    ],
)
def test_fit_keeps_the_verdict_and_the_problem(text, line):
    assert fit(text) == line
    assert len(fit(text).encode()) <= MAX_OUTPUT_BYTES


@settings(max_examples=300, deadline=None)
@given(word=st.sampled_from(["OK", "FAIL", "UNKNOWN"]),
       rest=st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_fit_is_80_printable_bytes_and_keeps_the_verdict_word(word, rest):
    line = fit(f"{word}: {rest}")
    assert len(line.encode()) <= MAX_OUTPUT_BYTES
    assert line.isascii() and line.isprintable()
    assert line.startswith(word)
