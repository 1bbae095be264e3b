"""A real single-node Slurm for tests: Debian's munged, slurmctld and slurmd, started with their own
key, socket, ports, state and config in a temp dir, and stopped (process groups killed) at the
end. Needs root (SlurmUser=root, slurmd runs as root as in production)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol")
OTHER_PREFIX = "other"


def missing_reason() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    absent = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if absent:
        return f"not installed: {', '.join(absent)} (Debian slurmctld, slurmd, slurm-client, munge)"
    if os.geteuid() != 0:
        return "slurmd and SlurmUser=root need root"
    return None


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin") / name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    root: Path
    conf: Path
    node: str
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def scontrol(self, *args: str) -> str:
        proc = subprocess.run(
            [_which("scontrol"), *args], capture_output=True, text=True, env=self.env, timeout=30
        )
        if proc.returncode != 0:
            raise AssertionError(f"scontrol {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def node_line(self) -> str:
        return self.scontrol("-o", "show", "node", self.node).strip()

    def wait_for(self, predicate, what: str, timeout_s: float = 60.0) -> str:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        line = ""
        while time.monotonic() < deadline:
            try:
                line = self.node_line()
            except AssertionError:
                line = ""
            if line and predicate(line):
                return line
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}; node: {line}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log", "healthcheck.log"):
            path = self.root / "log" / name
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(out)


def _conf(root: Path, node: str, health_check: Path | None, others: int = 0,
          others_on_this_host: bool = False) -> str:
    lines = [
        "ClusterName=rocmseattest",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/run/munge.socket",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "ReturnToService=2",
        "SlurmdTimeout=300",
    ]
    if health_check is not None:
        # the lines docs/fleet.md asks for; the interval is long so only slurmd's start-up run
        # happens during a test
        lines += [f"HealthCheckProgram={health_check}", "HealthCheckInterval=3600",
                  "HealthCheckNodeState=ANY"]
    lines += [
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN",
    ]
    if others:
        # nodes slurm.conf defines but no slurmd serves: at an address of TEST-NET-1 (RFC 5737)
        # nothing answers, so slurmctld never mistakes this host's slurmd for them
        host = f" NodeHostName={node}" if others_on_this_host else ""
        lines.append(f"NodeName={OTHER_PREFIX}[01-{others:02d}]{host} NodeAddr=192.0.2.1 CPUs=1 "
                     "RealMemory=100 State=UNKNOWN")
    lines += [
        f"PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    else:
        try:  # a daemon that forked helpers (slurmscriptd) may leave its group behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def running_cluster(root: Path, *, health_check: Path | None = None, others: int = 0,
                    others_on_this_host: bool = False) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd under `root`; yield when the node answers.
    `others`: more nodes in slurm.conf (`other01`...), which no slurmd serves; with
    `others_on_this_host` their NodeHostName is this host's name too."""
    for sub in ("run", "state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    os.chmod(root / "run", 0o755)
    node = socket.gethostname().split(".", 1)[0]
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, node, health_check, others, others_on_this_host))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["SLURM_CONF"] = str(conf)
    key = root / "munge.key"
    subprocess.run([_which("mungekey"), "--create", f"--keyfile={key}"], check=True,
                   capture_output=True, timeout=30)
    os.chmod(key, 0o600)
    cluster = Cluster(root, conf, node, env)
    try:
        cluster.procs.append(_start(
            [_which("munged"), "--foreground", "--force", f"--socket={root}/run/munge.socket",
             f"--key-file={key}", f"--pid-file={root}/run/munged.pid",
             f"--log-file={root}/log/munged.log", f"--seed-file={root}/run/munged.seed"],
            env, root / "log" / "munged.out",
        ))
        _wait_path(root / "run" / "munge.socket", 20)
        cluster.procs.append(_start([_which("slurmctld"), "-D", "-i", "-f", str(conf)], env,
                                    root / "log" / "slurmctld.out"))
        _wait_answer(cluster, 30)
        cluster.procs.append(_start([_which("slurmd"), "-D", "-f", str(conf)], env,
                                    root / "log" / "slurmd.out"))
        cluster.wait_for(lambda line: "NOT_RESPONDING" not in line and "UNKNOWN" not in line
                         and "SlurmdStartTime=None" not in line, "slurmd to register")
        yield cluster
    finally:
        for proc in reversed(cluster.procs):
            _stop(proc)


def _wait_path(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(0.1)


def _wait_answer(cluster: Cluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        proc = subprocess.run([_which("scontrol"), "ping"], capture_output=True, text=True,
                              env=cluster.env, timeout=30)
        if "UP" in proc.stdout:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"slurmctld did not answer: {proc.stdout}{proc.stderr}\n"
                                 f"{cluster.logs()}")
        time.sleep(0.5)
