"""The llama.cpp tier: a llama.cpp seat on the real llama-server (llama.cpp's tools/server as the
xllamacpp wheel embeds it), driven only through rocmseat's CLI (issue 36, "Must show").

launch -> READY -> watch on a seat with `[engine] kind = "llamacpp"` whose `command` is
rocmseat/demo/llama_server.py under the llama.cpp venv's Python (llama-server's own flags), the
models built by `rocmseat demo gguf-models`:

1. the acceptance the watchdog computes from /metrics (rocmseat.watch.metrics.read_page and
   window_between, the watchdog's own reading of two scrapes) equals
   sum(draft_n_accepted) / sum(draft_n) of the same requests' `timings`, exactly;
2. the drafter swapped behind the same key (the scrambled GGUF renamed over the drafter's path,
   the replica restarted): the canary alert with no traffic, then the collapse alert on traffic,
   each within a measured number of seconds (printed in the tier's summary);
3. cache-audit says "no compile cache" for the seat; `remediate status` says what applies.

Skips, with the reason printed, only when the llama.cpp venv is absent
($ROCMSEAT_LLAMACPP_PYTHON, default /opt/rocmseat/llamacpp-venv/bin/python, without xllamacpp and
gguf). Run it under `flock /work/wt/engine.lock` on a shared machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rocmseat.demo import LLAMA_SERVER, default_llamacpp_python
from rocmseat.watch.metrics import read_page
from rocmseat.watch.window import Snapshot, window_between
from tests.e2e.harness import NotifySocket, Proc, cli, free_port, note, scrape, tail, wait_for
from tests.e2e.world import dump_toml

pytestmark = pytest.mark.llamacpp

SEAT_NAME = "e2e-llamacpp"
REPLICA = "r0"
SERVED = "demo"
K = 3
INTERVAL_S = 1.0
READY_TIMEOUT_S = 120.0
ALERT_WAIT_S = 60.0
PROMPTS = ("the state of the world", "people work here every day", "Hello there",
           "def fibonacci(n):")


def _llama_python_or_skip() -> Path:
    python = default_llamacpp_python()
    if not python.exists():
        pytest.skip(f"no llama.cpp Python at {python} (set ROCMSEAT_LLAMACPP_PYTHON; .ci/setup "
                    "installs xllamacpp and gguf there)")
    done = subprocess.run([str(python), "-c", "import xllamacpp, gguf"], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        tail_line = (done.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"{python}: import xllamacpp, gguf fails: {tail_line}")
    return python


class LlamaWorld:
    def __init__(self, root: Path, python: Path, models: Path) -> None:
        self.root, self.python, self.models = root, python, models
        self.port, self.exporter_port = free_port(), free_port()
        self.drafter = root / "drafter.gguf"  # the path the seat names; swapped by rename
        shutil.copyfile(models / "gguf-drafter" / "model.gguf", self.drafter)
        self.sock_dir = Path(tempfile.mkdtemp(prefix="rocmseat-llama-"))
        self.notify = NotifySocket(self.sock_dir / "notify")
        self.launches: list[Proc] = []
        self.watch: Proc | None = None
        self.seat = root / "seat.toml"
        self.seat.write_text(dump_toml(self.seat_doc()))

    def seat_doc(self) -> dict:
        py = str(self.python)
        return {
            "name": SEAT_NAME, "backend": "cpu", "tp": 1,
            "cache_root": str(self.root / "cache"), "state_dir": str(self.root / "state"),
            "engine": {"kind": "llamacpp", "command": [py, str(LLAMA_SERVER)], "python": py,
                       "host": "127.0.0.1"},
            "model": {"path": str(self.models / "gguf-target" / "model.gguf"),
                      "served_name": SERVED},
            "serve": {"port_base": self.port, "max_model_len": 2048, "max_num_seqs": 2},
            "replicas": {"mode": "auto"},
            "preflight": {"refuse_on_fail": False, "hip": False},
            "readiness": {"timeout_s": READY_TIMEOUT_S, "canary_prompt": "Hello",
                          "canary_max_tokens": 4},
            "watch": {"interval_s": INTERVAL_S, "expected_acceptance_length": 1.0 + K,
                      "exporter_listen": f"127.0.0.1:{self.exporter_port}"},
            "canary": {"enabled": True, "interval_s": 1.0, "max_tokens": 16,
                       "prompts": list(PROMPTS[:2])},
            "drafter": {"method": "draft_model", "path": str(self.drafter),
                        "num_speculative_tokens": K},
        }

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        env["ROCMSEAT_STATE_DIR"] = str(self.root / "state")
        env.update(extra)
        return env

    def launch(self) -> float:
        """`rocmseat launch SEAT --replica r0`; the seconds to READY=1."""
        self.notify.drain()
        self.notify.messages.clear()
        log = self.root / f"launch-{len(self.launches)}.log"
        proc = Proc(["launch", self.seat, "--replica", REPLICA], log,
                    self.env(NOTIFY_SOCKET=str(self.notify.path)))
        self.launches.append(proc)
        started = time.monotonic()

        def ready() -> bool:
            if not proc.alive():
                raise AssertionError(f"rocmseat launch exited {proc.proc.returncode} before "
                                     f"READY=1:\n{tail(log)}")
            return self.notify.saw("READY=1")

        wait_for("READY=1", ready, READY_TIMEOUT_S + 30, lambda: tail(log))
        return time.monotonic() - started

    def stop_replica(self) -> None:
        for proc in self.launches:
            if proc.alive():
                proc.stop(grace_s=30)

    def start_watch(self) -> Proc:
        self.watch = Proc(["watch", self.seat, "--interval", str(INTERVAL_S),
                           "--exporter-listen", f"127.0.0.1:{self.exporter_port}"],
                          self.root / "watch.log", self.env())
        port = self.exporter_port
        wait_for("the watchdog's exporter", lambda: "rocmseat_" in scrape(port), 60,
                 lambda: tail(self.watch.log) if self.watch else "")
        return self.watch

    def alert_active(self, alert: str) -> bool:
        for line in scrape(self.exporter_port).splitlines():
            if (line.startswith("rocmseat_alert_active{") and f'alert="{alert}"' in line
                    and f'replica="{REPLICA}"' in line):
                return line.rsplit(" ", 1)[-1] in ("1", "1.0")
        return False

    def close(self) -> None:
        for proc in [*self.launches, *([self.watch] if self.watch else [])]:
            proc.stop(grace_s=30)
        self.notify.close()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaWorld]:
    python = _llama_python_or_skip()
    root = tmp_path_factory.mktemp("llamacpp")
    dest = root / "models"
    done = cli("demo", "gguf-models", dest, "--llamacpp-python", python, "--json", timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    world = LlamaWorld(root, python, dest)
    try:
        yield world
    finally:
        world.close()


def _complete(port: int, prompt: str, max_tokens: int = 32) -> dict:
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=120, json={
        "model": SERVED, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    r.raise_for_status()
    return dict(r.json())


def test_watch_reads_the_acceptance_the_requests_report_exactly(llama: LlamaWorld):
    ready_s = llama.launch()
    url = f"http://127.0.0.1:{llama.port}/metrics"
    before = Snapshot(time.monotonic(), read_page(httpx.get(url, timeout=10).text))
    timings = [_complete(llama.port, p)["timings"] for p in PROMPTS]
    after = Snapshot(time.monotonic(), read_page(httpx.get(url, timeout=10).text))
    window = window_between(before, after)
    drafted = sum(t["draft_n"] for t in timings)
    accepted = sum(t["draft_n_accepted"] for t in timings)
    assert drafted > 0
    assert window.draft_tokens == drafted and window.accepted_tokens == accepted
    assert window.draft_acceptance_rate == accepted / drafted  # exactly, not approximately
    assert accepted == drafted  # the drafter has the target's weights: every draft accepted
    note("watch_reads_the_acceptance_the_requests_report_exactly",
         f"READY after {ready_s:.1f} s; {len(PROMPTS)} requests: draft_n {drafted}, "
         f"draft_n_accepted {accepted}; /metrics window: draft tokens "
         f"{window.draft_tokens:g}, accepted {window.accepted_tokens:g}, drafts "
         f"{window.drafts:g}, rate {window.draft_acceptance_rate} (exact)")


def test_a_swapped_drafter_raises_the_canary_and_the_collapse_alert(llama: LlamaWorld):
    if not llama.launches or not llama.launches[-1].alive():
        llama.launch()
    watch = llama.start_watch()
    wait_for("the canary's baseline on the healthy drafter",
             lambda: "canary-baseline-learned" in watch.log.read_text(errors="replace"), 60,
             lambda: tail(watch.log))
    for p in PROMPTS:  # healthy traffic: no alert
        _complete(llama.port, p)
    assert not llama.alert_active("spec_drafter_dead"), tail(watch.log)
    assert not llama.alert_active("drafter_canary_failed"), tail(watch.log)

    llama.stop_replica()
    swapped = llama.root / "drafter.gguf.new"
    shutil.copyfile(llama.models / "gguf-drafter-other" / "model.gguf", swapped)
    swapped.rename(llama.drafter)  # same path, same key: only the weights changed
    llama.launch()
    started = time.monotonic()
    wait_for("drafter_canary_failed with no traffic",
             lambda: llama.alert_active("drafter_canary_failed"), ALERT_WAIT_S,
             lambda: tail(watch.log))
    canary_s = time.monotonic() - started

    started = time.monotonic()
    deadline = started + ALERT_WAIT_S
    fired = False
    while time.monotonic() < deadline and not fired:
        _complete(llama.port, PROMPTS[int(time.monotonic()) % len(PROMPTS)])
        fired = llama.alert_active("spec_drafter_dead")
    collapse_s = time.monotonic() - started
    assert fired, f"no spec_drafter_dead within {ALERT_WAIT_S:.0f} s of traffic:\n{tail(watch.log)}"
    note("a_swapped_drafter_raises_the_canary_and_the_collapse_alert",
         f"scrambled drafter behind the same key: drafter_canary_failed {canary_s:.1f} s after "
         f"READY with no traffic; spec_drafter_dead {collapse_s:.1f} s after traffic began "
         f"(watch interval {INTERVAL_S:g} s)")


def test_cache_audit_and_remediate_say_what_applies(llama: LlamaWorld):
    status = cli("remediate", "status", "--seat", llama.seat, "--json", env=llama.env())
    doc = json.loads(status.stdout)
    assert doc["engine"] == "llamacpp", status.stdout
    # every rung but the cache's: llama.cpp has no compile cache to move aside
    assert doc["steps_not_applying"] == ["move-cache-aside-restart"], status.stdout
    assert "restart-without-drafter" in doc["steps_applying"], status.stdout
    audit = cli("cache-audit", llama.seat, env=llama.env())
    assert "no compile cache" in audit.stdout + audit.stderr, audit.stdout + audit.stderr
    said = [line.strip() for line in audit.stdout.splitlines() if "compile cache" in line]
    note("cache_audit_and_remediate_say_what_applies",
         f"cache-audit: {said[:1]}; remediate status: applies {doc['steps_applying']}, not "
         f"{doc['steps_not_applying']}")

