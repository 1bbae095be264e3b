"""One CPU seat, its replica and its watchdog, shared by the scenarios of a module.

At most one engine runs at a time: `launch` refuses to start a second replica process while one
is alive, and `close` stops everything this module started (by pid, never by name).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import REPO
from tests.e2e.harness import (
    API_KEY,
    NotifySocket,
    Proc,
    Timeout,
    Webhook,
    count_start,
    free_port,
    scrape,
    tail,
    wait_for,
)

SEAT_NAME = "e2e-cpu"
REPLICA = "r0"
SERVED = "demo"
INTERVAL_S = 2.0
READY_TIMEOUT_S = 300.0  # the seat's readiness timeout; a cold compile here takes ~65 s


def dump_toml(doc: dict[str, Any]) -> str:
    """A TOML writer for seat files: scalars, lists, tables, inline tables, arrays of tables."""

    def key(k: str) -> str:
        return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = [f"{k} = {value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not (v and isinstance(v[0], dict)))]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{key(kk)} = {value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines += ["", f"[[{k}]]"] + [f"{key(kk)} = {value(vv)}" for kk, vv in item.items()]
    return "\n".join(lines) + "\n"


@dataclass
class World:
    root: Path
    engine_python: Path
    models: Path
    notify_path: Path
    engine_port: int = field(default_factory=free_port)
    exporter_port: int = field(default_factory=free_port)
    webhook: Webhook = field(default_factory=Webhook)
    launches: list[Proc] = field(default_factory=list)
    watch: Proc | None = None
    notify: NotifySocket | None = None
    healthy_texts: list[str] | None = None
    last_ready_s: float = 0.0
    warm_from: str | None = None  # the scenario whose compiled cache seeded this world's

    def __post_init__(self) -> None:
        self.webhook.start()
        self.notify = NotifySocket(self.notify_path)

    # ----- the seat ---------------------------------------------------------------------------
    @property
    def cache_root(self) -> Path:
        return self.root / "cache"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def startup_report(self) -> Path:
        return self.state_dir / "seats" / SEAT_NAME / REPLICA / "startup.json"

    def seat_doc(self, *, feature: str = "a", num_speculative_tokens: int = 3) -> dict[str, Any]:
        """launchers/demo-cpu.toml, pointed at this session's models, ports and folders."""
        doc = tomllib.loads((REPO / "launchers" / "demo-cpu.toml").read_text())
        doc["name"] = SEAT_NAME
        doc["cache_root"] = str(self.cache_root)
        doc["state_dir"] = str(self.state_dir)
        py = str(self.engine_python)
        doc["engine"].update(command=[py, "-m", "vllm.entrypoints.openai.api_server"],
                             model_flag="--model", python=py, host="127.0.0.1")
        doc["model"].update(path=str(self.models / "target"), served_name=SERVED)
        doc["drafter"].update(method="draft_model", path=str(self.models / "drafter"),
                              num_speculative_tokens=num_speculative_tokens)
        doc["serve"]["port_base"] = self.engine_port
        # Served with an API key: READY means the canary authenticated (issue 16).
        doc["serve"]["extra_args"] = [*doc["serve"].get("extra_args", []), "--api-key", API_KEY]
        # A feature toggle the seat classifies as key (RADIANCE_* style, as in
        # launchers/r9700-mxfp4-dflash.toml): changing it
        # must move the cache aside even though vLLM's own hash does not see it.
        doc.setdefault("env", {})["E2E_FEATURE"] = feature
        doc["env_classes"] = {"key": ["E2E_*"]}
        doc.setdefault("readiness", {})["timeout_s"] = READY_TIMEOUT_S
        doc["watch"] = {
            "interval_s": INTERVAL_S,
            # Pinned: a learned baseline needs thousands of drafts (rocmseat.watch.detector).
            "expected_acceptance_length": 1.0 + num_speculative_tokens,
            "exporter_listen": f"127.0.0.1:{self.exporter_port}",
            "webhook_url": self.webhook.url,
        }
        return doc

    def write_seat(self, name: str = "seat.toml", **kw: Any) -> Path:
        path = self.root / name
        path.write_text(dump_toml(self.seat_doc(**kw)))
        return path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        env["ROCMSEAT_STATE_DIR"] = str(self.state_dir)
        env["ROCMSEAT_VLLM_PYTHON"] = str(self.engine_python)
        env.update(extra)
        return env

    # ----- the replica ------------------------------------------------------------------------
    def running(self) -> Proc | None:
        alive = [p for p in self.launches if p.alive()]
        return alive[-1] if alive else None

    def launch(self, seat: Path, *extra: str) -> Proc:
        """`rocmseat launch SEAT --replica r0 [EXTRA...]`, returning once READY=1 reached the
        notify socket."""
        assert self.running() is None, "one engine at a time: stop the running replica first"
        assert self.notify is not None
        self.notify.drain()
        self.notify.messages.clear()
        log = self.root / f"launch-{len(self.launches)}.log"
        proc = Proc(["launch", seat, "--replica", REPLICA, *extra], log,
                    self.env(NOTIFY_SOCKET=str(self.notify_path)))
        self.launches.append(proc)
        notify = self.notify

        def ready() -> bool:
            if not proc.alive():
                raise AssertionError(f"rocmseat launch exited {proc.proc.returncode} before "
                                     f"READY=1; last lines:\n{tail(log)}")
            return notify.saw("READY=1")

        start = time.monotonic()
        wait_for("READY=1 on the notify socket", ready, READY_TIMEOUT_S + 60,
                 lambda: f"notify: {notify.messages[-5:]}\nlaunch log:\n{tail(log)}")
        self.last_ready_s = time.monotonic() - start
        count_start(log)
        return proc

    def stop_replica(self) -> int | None:
        proc = self.running()
        return proc.stop() if proc is not None else None

    def engine_pids(self, proc: Proc) -> list[int]:
        """The engine's API server process under `rocmseat launch` (found by pid ancestry)."""
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        out = []
        for child in children:
            try:
                if "vllm.entrypoints.openai.api_server" in " ".join(child.cmdline()):
                    out.append(child.pid)
            except psutil.Error:
                continue
        return out

    # ----- the watchdog -----------------------------------------------------------------------
    def start_watch(self, seat: Path) -> Proc:
        if self.watch is not None and self.watch.alive():
            return self.watch
        self.watch = Proc(["watch", seat, "--interval", str(INTERVAL_S), "--exporter-listen",
                           f"127.0.0.1:{self.exporter_port}", "--webhook", self.webhook.url],
                          self.root / "watch.log", self.env())
        port = self.exporter_port
        wait_for("the watchdog's exporter", lambda: "rocmseat_" in scrape(port), 60,
                 lambda: tail(self.watch.log) if self.watch else "")
        return self.watch

    def exporter(self) -> str:
        return scrape(self.exporter_port)

    def seen(self) -> str:
        """What a failing wait reports: the watchdog's output, exporter, webhook, launch tail."""
        last = self.launches[-1].log if self.launches else None
        alerts = [ln for ln in self.exporter().splitlines() if "alert" in ln]
        return (f"exporter alert lines: {alerts}\nwebhook alerts: {self.webhook.alerts()[-4:]}\n"
                f"watch log:\n{tail(self.watch.log) if self.watch else '(no watch)'}\n"
                f"launch log:\n{tail(last) if last else '(no launch)'}")

    def close(self) -> None:
        errors = []
        for proc in [*self.launches, *([self.watch] if self.watch else [])]:
            try:
                proc.stop(grace_s=30)
            except (Timeout, OSError) as exc:
                errors.append(str(exc))
        self.webhook.stop()
        if self.notify is not None:
            self.notify.close()
        assert not errors, errors


def fresh_models(demo_models: Path, path: Path) -> Path:
    """The session's demo models, copied afresh to `path`: every engine world of the session
    serves its models from this one path (a module restores it before its first start), so
    their compiled graphs match: vLLM's compile hash covers the model's path (ModelConfig's
    `model` in VllmConfig.compute_hash, vllm/config/model.py), rocmseat's key its contents."""
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(demo_models, path)
    return path


@dataclass
class WarmCache:
    """The replica cache of the session's first healthy start (the whole loop's, a cold compile
    of the e2e seat), for the worlds whose first start does not test a cold compile: `seed`
    copies it in as their replica's cache before their first start (same models path, same
    key). vLLM CPU 0.32.0 cannot load its own AOT artifacts ("'function' object has no
    attribute 'finalize_loading'") and compiles again, but on Inductor's caches of the same
    store: its init took 12 s on the seeded cache against 38-82 s on an empty one (this host,
    loaded)."""

    store: Path
    source: str | None = None

    def capture(self, world: World, scenario: str) -> None:
        if self.source is None:
            shutil.copytree(world.cache_root / REPLICA, self.store / REPLICA, symlinks=True)
            self.source = scenario

    def seed(self, world: World) -> str | None:
        """Copy the captured cache in (when there is one and the world has none yet); returns
        the scenario it came from, or None: the world's first start compiles cold."""
        if self.source is None or (world.cache_root / REPLICA).exists():
            return None
        world.cache_root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.store / REPLICA, world.cache_root / REPLICA, symlinks=True)
        return self.source
