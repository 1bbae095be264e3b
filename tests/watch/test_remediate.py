"""Remediation (issue 20) on replayed pages: a real Watcher scrapes /metrics pages rendered from
vLLM's own page (tests/fixtures/metrics/seq/00-healthy.txt, counters advanced per scrape, reset
on a restart), the real Remediator decides, journals and acts through the real SeatEdge (cache
moved aside through rocmseat.cache.store, restart through `[remediate] restart_command`, a real
program run by rocmseat.runner); the replayed engine restarts when that command ran.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from rocmseat.cache.key import ConfigKey
from rocmseat.cache.store import MOVED_ASIDE_NAME, prepare
from rocmseat.launch.startuplog import classify_text
from rocmseat.placement.recorded import read_recorded, write_recorded
from rocmseat.placement.resolve import resolve
from rocmseat.placement.rules import replica_state_dir
from rocmseat.runner import run
from rocmseat.seat.load import load_seat
from rocmseat.watch import alerts as A
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.readiness import replica_readiness
from rocmseat.watch.remediate import documents, journal
from rocmseat.watch.remediate import policy as P
from rocmseat.watch.remediate.actions import SeatEdge
from rocmseat.watch.remediate.service import Remediator, Setup
from rocmseat.watch.remediate.service import reset as do_reset
from rocmseat.watch.scrape import Target
from tests.conftest import FIXTURES
from tests.watch.conftest import FakeClock, page

BASE = page("00-healthy.txt")
LOGS = FIXTURES / "logs"
HIT_LOG = (LOGS / "rocm-0.33-aot-hit-eagle3.log").read_text()
FRESH_LOG = (LOGS / "rocm-0.33-fresh-dflash.log").read_text()
KEY = ConfigKey("a" * 64, {"model": "target"})
INTERVAL = 10.0
# The restart command: a real program, run without a shell, that records what it was asked.
RECORDER = ("import os, sys; open(sys.argv[1], 'a').write(os.environ['ROCMSEAT_REPLICA'] + ' ' "
            "+ os.environ['ROCMSEAT_REMEDIATE_MODE'] + '\\n')")


class Engine:
    """One replica's vLLM counters, rendered into vLLM's own page."""

    def __init__(self, alpha: float, *, tokens: float = 400.0) -> None:
        self.alpha, self.tokens = alpha, tokens
        self.spec = True
        self.created = 1_795_962_710.0
        self.drafts = self.draft_tokens = self.gen = 0.0
        self.pos = [0.0, 0.0, 0.0]
        self.running = 3.0
        self.stalled = False  # requests run, nothing is drafted or generated

    def advance(self, drafts: float = 100.0) -> None:
        if self.stalled:
            return
        if self.spec:
            self.drafts += drafts
            self.draft_tokens += 3 * drafts
            for i in range(3):
                self.pos[i] += round(drafts * self.alpha ** (i + 1))
        self.gen += self.tokens

    def restart(self, *, alpha: float, tokens: float, spec: bool = True) -> None:
        self.__init__(alpha, tokens=tokens)  # type: ignore[misc]
        self.spec = spec
        self.created += 500.0

    def page(self) -> str:
        values = {
            "spec_decode_num_drafts_total": self.drafts,
            "spec_decode_num_draft_tokens_total": self.draft_tokens,
            "spec_decode_num_accepted_tokens_total": sum(self.pos),
            "generation_tokens_total": self.gen,
            "num_requests_running": self.running,
        }
        lines = []
        for line in BASE.splitlines():
            if not self.spec and "spec_decode" in line:
                continue
            name = re.match(r"vllm:(\w+)\{", line)
            if name is not None:
                metric = name.group(1)
                head = line.rsplit(" ", 1)[0]
                if metric == "spec_decode_num_accepted_tokens_per_pos_total":
                    position = int(re.search(r'position="(\d)"', line).group(1))
                    line = f"{head} {self.pos[position]:.1f}"
                elif metric in values:
                    line = f"{head} {values[metric]:.1f}"
                elif metric.endswith("_created"):
                    line = f"{head} {self.created:.6e}"
            lines.append(line)
        return "\n".join(lines) + "\n"


def cpu_seat(tmp_path: Path) -> Path:
    """The seat as a cpu seat (one replica, no GPU to read): for the CLI's own paths."""
    return seat_text(tmp_path, backend="cpu")


def seat_text(tmp_path: Path, *, replicas: int = 1, mode: str = "on", extra: str = "",
              backend: str = "rocm") -> Path:
    """The watch tests' seat (tests/watch/test_cli.py) as a seat of `replicas` GPU pairs with
    `[remediate]` on, restarting through a real command."""
    from tests.watch.test_cli import write_seat

    path = write_seat(tmp_path, 8100, KEY.digest)
    text = path.read_text().replace('name = "w6-test"', 'name = "heal"')
    if backend == "rocm":
        pairs = ", ".join(f'["0000:{0x10 + 2 * i:02x}:00.0", "0000:{0x11 + 2 * i:02x}:00.0"]'
                          for i in range(replicas))
        names = ", ".join(f'"r{i}"' for i in range(replicas))
        text = text.replace('backend = "cpu"\ntp = 1', 'backend = "rocm"\ntp = 2')
        text += f'[replicas]\nmode = "explicit"\npairs = [{pairs}]\nnames = [{names}]\n'
    command = json.dumps([sys.executable, "-c", RECORDER, str(tmp_path / "restarts.log")])
    text += (f'[remediate]\nmode = "{mode}"\nrestart_command = {command}\n'
             f'verify_drafts = 200\nverify_s = 30\n{extra}\n')
    path.write_text(text)
    return path


class World:
    """A seat launched by rocmseat (placement records, caches keyed, startup reports), its
    replayed engines, a real Watcher and a real Remediator."""

    def __init__(self, tmp_path: Path, *, replicas: int = 1, mode: str = "on",
                 log_text: str = HIT_LOG, recorded: bool = True, extra: str = "",
                 after_restart: dict | None = None, node_refusal=lambda: None) -> None:
        self.tmp = tmp_path
        self.seat_file = seat_text(tmp_path, replicas=replicas, mode=mode, extra=extra)
        self.seat = load_seat(self.seat_file)
        self.state = tmp_path / "state"
        self.clock = FakeClock()
        records = resolve(self.seat, None, state_root=self.state)
        for record in records:
            prepare(record.cache_dir, KEY, seat_name="heal")
            if recorded:
                write_recorded(record)
            self.write_startup(record.replica, log_text)
        self.engines = {r.replica: Engine(0.8) for r in records}
        self.targets = [Target(r.replica, f"http://{r.replica}/metrics", r.cache_dir)
                        for r in records]
        # how each replica comes back from a restart, by mode
        self.after_restart = after_restart or {"drafter": {"alpha": 0.8, "tokens": 400.0},
                                               "no-drafter": {"alpha": 0.0, "tokens": 200.0,
                                                              "spec": False}}
        self.restarts: list[tuple[str, str]] = []
        self.lines: list[str] = []
        self.transitions: list = []
        self.watcher = Watcher(self.targets, WatchConfig(
            interval_s=INTERVAL, pinned_al=2.9, state_dir=self.state, key_prefix="heal"),
            fetch=lambda url, t: self.engines[url.split("/")[2]].page(), clock=self.clock,
            on_transition=self.transitions.append)
        by_name = {r.replica: r for r in read_recorded(self.seat, self.state).records}
        self.edge = SeatEdge(self.seat, by_name, runner=self.runner)
        self.remediator = Remediator(
            Setup(self.seat, self.seat_file, self.state, mode, "gpu07", by_name,
                  max_age_s=3 * INTERVAL), self.edge, log=self.lines.append, clock=self.clock,
            background=False, node_refusal=node_refusal,
            reread=lambda: {r.replica: r for r in read_recorded(self.seat, self.state).records})

    def write_startup(self, replica: str, log_text: str) -> None:
        directory = replica_state_dir(self.state, "heal", replica)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "startup.json").write_text(json.dumps({
            "schema": "rocmseat.startup/v1", "seat": "heal", "replica": replica,
            "started_at": "2026-12-01T08:00:00Z",
            "log": classify_text(log_text).to_json()}))

    def runner(self, argv, **kw):
        """The real runner runs the restart command; then the replayed engine restarts as
        launch would: a fresh cache where it was moved aside, a fresh-compile startup report."""
        done = run(argv, **kw)
        env = kw["env"]
        replica, mode = env["ROCMSEAT_REPLICA"], env["ROCMSEAT_REMEDIATE_MODE"]
        self.restarts.append((replica, mode))
        record = self.edge.records[replica]
        prepare(record.cache_dir, KEY, seat_name="heal")
        self.write_startup(replica, FRESH_LOG)
        self.engines[replica].restart(**self.after_restart[mode])
        return done

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            for engine in self.engines.values():
                engine.advance()
            self.clock.tick(INTERVAL)
            self.watcher.step()
            self.remediator.after_step(self.watcher)

    def status(self, replica: str = "r0"):
        return next(s for s in self.watcher.statuses if s.replica == replica)

    def ready(self, replica: str = "r0"):
        return replica_readiness(self.status(replica), evaluated_at_s=self.watcher.evaluated_at_s,
                                 now_s=self.clock(), max_age_s=self.watcher.config.max_age_s)

    def journal(self) -> list[dict]:
        return journal.read_records(self.state, "heal", last=1000)[0]

    def outcomes(self) -> list[tuple]:
        return [(r["replica"], r["step"], r["action"], r["outcome"]) for r in self.journal()]

    def ladder(self, replica: str = "r0") -> P.Ladder:
        return journal.load_state(self.state, "heal")[0].ladder(replica)


def collapse(world: World, *names: str) -> None:
    for name in names or ("r0",):
        world.engines[name].alpha = 0.02
        world.engines[name].tokens = 110.0


def test_step1_moves_the_cache_aside_and_resolves_when_acceptance_recovers(tmp_path):
    world = World(tmp_path)
    world.step(3)
    assert world.ready().ready and not world.journal()
    collapse(world)
    world.step(1)
    assert A.SPEC_DRAFTER_DEAD in world.status().alerts
    # step 1: the start loaded its caches (the startup report says so): move aside, restart
    assert world.restarts == [("r0", "drafter")]
    assert world.outcomes() == [("r0", 1, P.MOVE_CACHE_RESTART, "started")]
    started = world.journal()[0]
    assert started["why"]["alert"] == A.SPEC_DRAFTER_DEAD
    assert started["why"]["acceptance_length"] < 1.1
    assert started["why"]["last_start"] == "2026-12-01T08:00:00Z"
    aside = sorted((tmp_path / "cache").glob("r0.stale-*"))
    assert len(aside) == 1  # moved, never deleted: evidence and rollback
    reason = json.loads((aside[0] / MOVED_ASIDE_NAME).read_text())
    assert "alert spec_drafter_dead" in reason["why"] and "2026-12-01T08:00:00Z" in reason["why"]
    assert world.status().alerts.count(A.REMEDIATION_RUNNING) == 0  # raised after the step
    world.step(1)  # the new engine (counters reset): the restart is seen
    assert world.status().restarted and A.REMEDIATION_RUNNING in world.status().alerts
    world.step(2)  # 200 drafts of the new engine at alpha 0.8
    assert world.outcomes()[-1] == ("r0", 1, P.MOVE_CACHE_RESTART, "recovered")
    done = world.journal()[-1]
    assert done["diagnosis"] == P.DIAGNOSIS_CACHE
    assert done["figures"]["drafts"] == 200 and done["figures"]["p0"] == 0.8
    assert done["figures"]["acceptance_length"] > 2.9
    world.step(1)
    assert A.REMEDIATION_RUNNING not in world.status().alerts
    resolved = [t for t in world.transitions if t.alert == A.REMEDIATION_RUNNING
                and t.state == A.RESOLVED]
    assert dict(resolved[-1].details)["diagnosis"] == "stale compile cache"
    assert world.ready().ready and world.ladder().mode == "drafter"
    assert world.remediator.counts[("r0", P.MOVE_CACHE_RESTART, "recovered")] == 1
    assert any(line.startswith("rocmseat-remediate replica=r0 step=1 action=move-cache-aside-"
                               "restart outcome=recovered") for line in world.lines)


def test_step2_runs_without_the_drafter_when_the_fresh_compile_does_not_help(tmp_path):
    world = World(tmp_path, after_restart={
        "drafter": {"alpha": 0.02, "tokens": 110.0},  # the drafter's weights are wrong
        "no-drafter": {"alpha": 0.0, "tokens": 200.0, "spec": False}})
    world.step(3)
    collapse(world)
    world.step(4)  # trigger, restart seen, 200 drafts: still collapsed -> step 2 at once
    assert world.outcomes()[:3] == [
        ("r0", 1, P.MOVE_CACHE_RESTART, "started"),
        ("r0", 1, P.MOVE_CACHE_RESTART, "still collapsed after a fresh compile"),
        ("r0", 2, P.RESTART_NO_DRAFTER, "started")]
    assert world.journal()[1]["diagnosis"] == P.DIAGNOSIS_NOT_CACHE
    assert world.restarts == [("r0", "drafter"), ("r0", "no-drafter")]
    world.step(5)  # the restart seen, then 30 s of generation without the drafter
    last = world.journal()[-1]
    assert (last["step"], last["outcome"]) == (2, "serving without the drafter")
    assert last["figures"]["tokens_per_s"] == 20.0
    assert last["figures"]["collapsed_tokens_per_s"] == 11.0
    assert "r0 runs without its drafter since" in last["diagnosis"]
    assert "run `rocmseat remediate reset r0`" in last["diagnosis"]
    world.step(1)
    status = world.status()
    assert A.REPLICA_NO_DRAFTER in status.alerts
    # /ready follows the replica's actual mode: no spec series expected, so not blind
    assert A.SPEC_BLIND not in status.alerts and world.ready().ready
    assert world.ladder().mode == "no-drafter"
    # reset: the halts and the mode go; the replica restarts with its drafter
    _, back, _ = do_reset(world.state, "heal", "r0", world.clock())
    assert back == ["r0"] and world.ladder().mode == "drafter"
    assert world.outcomes()[-2:] == [("r0", None, "reset", "reset by the operator"),
                                     ("r0", None, "reset", "reset: back with its drafter")]


def test_the_cli_status_and_reset(rocmseat_cli, tmp_path):
    world = World(tmp_path, after_restart={
        "drafter": {"alpha": 0.8, "tokens": 400.0},
        "no-drafter": {"alpha": 0.0, "tokens": 200.0, "spec": False}}, log_text=FRESH_LOG)
    world.step(3)
    collapse(world)
    world.step(1)  # the last start compiled afresh: step 1 does not apply, straight to step 2
    assert world.restarts == [("r0", "no-drafter")]
    assert world.journal()[0]["why"]["step1"].startswith("not applicable")
    world.step(5)
    result = rocmseat_cli("remediate", "status", "--seat", str(world.seat_file), "--json")
    assert result.exit_code == 1, result.stderr  # a replica off its normal mode
    doc = json.loads(result.stdout)
    assert doc["schema"] == "rocmseat.remediation-status/v1"
    assert doc["ladders"]["r0"]["mode"] == "no-drafter"
    assert [r["schema"] for r in doc["journal"]] == ["rocmseat.remediation/v1"] * 2
    text = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert "r0: no-drafter since" in text.stdout
    result = rocmseat_cli("remediate", "reset", "r0", "--state-dir", str(world.state))
    assert result.exit_code == 0, result.stderr
    assert "restarted r0 with its drafter" in result.stdout
    # the real restart_command ran (the state named the seat file)
    assert (tmp_path / "restarts.log").read_text().splitlines()[-1] == "r0 drafter"
    assert rocmseat_cli("remediate", "status", "--state-dir", str(world.state)).exit_code == 0


def test_dry_run_acts_on_nothing(tmp_path):
    world = World(tmp_path, mode="dry-run")
    world.step(3)
    collapse(world)
    world.step(6)
    assert world.restarts == [] and not list((tmp_path / "cache").glob("r0.stale-*"))
    records = world.journal()
    assert [(r["outcome"], r["dry_run"]) for r in records] == [
        (f"dry-run: would {P.MOVE_CACHE_RESTART}", True)]  # said once, not every evaluation
    assert world.ladder().pending is None and world.ladder().mode == "drafter"
    assert A.SPEC_DRAFTER_DEAD in world.status().alerts


@pytest.mark.parametrize(("log", "read"), [
    ("rocm-0.33-aot-hit-eagle3.log", True), ("cpu-0.32-restart-load-failure.log", True),
    ("rocm-0.33-fresh-dflash.log", False), ("cpu-0.32-fresh-draft-model.log", False)])
def test_step1_applies_when_the_last_start_read_its_caches(tmp_path, log, read):
    """The CPU build restarts on its cache with a load failure (found, not loadable, compiled
    again): that start read the cache too, so moving it aside is step 1 there as well."""
    from rocmseat.watch.remediate.service import startup_facts

    world = World(tmp_path, log_text=(LOGS / log).read_text())
    assert startup_facts(world.state, "heal", "r0") == (read, "2026-12-01T08:00:00Z")


def test_a_replica_rocmseat_did_not_launch_is_never_acted_on(tmp_path):
    world = World(tmp_path, recorded=False)
    world.step(3)
    collapse(world)
    world.step(4)
    assert world.restarts == []
    assert [r["outcome"] for r in world.journal()] == [
        "refused: r0 has no placement record (not launched by rocmseat with this state dir): "
        "never acted on"]
    # launched now (its record written): the records are read again, the ladder acts
    for record in resolve(world.seat, None, state_root=world.state):
        write_recorded(record)
    world.step(1)
    assert world.restarts == [("r0", "drafter")]


def test_a_stale_view_starts_nothing(tmp_path):
    world = World(tmp_path)
    world.step(3)
    collapse(world)
    for engine in world.engines.values():
        engine.advance()
    world.clock.tick(INTERVAL)
    world.watcher.step()
    world.clock.tick(600)  # the watcher's last evaluation is now old
    world.remediator.after_step(world.watcher)
    assert world.restarts == []
    assert world.journal()[0]["outcome"].startswith("refused: the watcher's view is stale")


def test_the_per_replica_bound_trips_and_halts(tmp_path):
    world = World(tmp_path)
    world.step(3)
    collapse(world)
    world.step(4)
    assert world.outcomes()[-1][3] == "recovered"
    collapse(world)  # the same replica, the same config key, within the day
    world.step(2)
    assert world.restarts == [("r0", "drafter")]
    [halt] = [r for r in world.journal() if r["outcome"].startswith("halted:")]
    assert halt["outcome"] == (
        "halted: one remediation per replica and config key per day: r0 was already "
        f"remediated under config key {KEY.digest[:12]} in the last 24 h")
    # said once; later evaluations journal the refusal once
    assert world.journal()[-1]["outcome"] == (
        "refused: remediation is halted for replica:r0 (one remediation per replica and config "
        "key per day)")
    world.step(1)
    assert A.REMEDIATION_HALTED in world.status().alerts
    assert dict(world.remediator.halted_scopes())["replica:r0"] is True
    halted = [t for t in world.transitions if t.alert == A.REMEDIATION_HALTED]
    assert "rocmseat remediate reset r0" in dict(halted[0].details)["hint"]
    world.step(3)
    assert world.restarts == [("r0", "drafter")]  # halted: nothing more
    do_reset(world.state, "heal", "r0", world.clock())
    world.step(1)  # the watcher reads the reset state: the halt resolves, the ladder may act
    assert not world.watcher.book.is_active("r0", A.REMEDIATION_HALTED)
    assert world.outcomes()[-2:] == [("r0", None, "reset", "reset by the operator"),
                                     ("r0", 2, P.RESTART_NO_DRAFTER, "started")]


def test_the_node_bound_trips_and_halts(tmp_path):
    world = World(tmp_path, replicas=3, extra="node_per_hour = 2\nmax_fraction = 1.0")
    world.step(3)
    collapse(world, "r0", "r1", "r2")
    world.step(1)
    assert world.restarts == [("r0", "drafter"), ("r1", "drafter")]
    assert world.outcomes()[-1] == ("r2", 1, P.MOVE_CACHE_RESTART,
                                    "halted: 2 remediations per node per hour: 2 remediations "
                                    "on gpu07 in the last hour")
    world.step(1)
    assert all(A.REMEDIATION_HALTED in world.status(n).alerts for n in ("r0", "r1", "r2"))
    assert dict(world.remediator.halted_scopes())["node:gpu07"] is True


def test_the_fleet_bound_trips_and_halts(tmp_path):
    world = World(tmp_path, replicas=4, extra="max_fraction = 0.25")
    world.step(3)
    collapse(world, "r0", "r1")
    world.step(1)
    assert world.restarts == [("r0", "drafter")]  # one of four in remediation at once
    assert world.outcomes()[-1][3] == (
        "halted: at most 0.25 of the watched replicas in remediation at once: 1 of 4 watched "
        "replicas already in remediation (r0); limit 1")
    assert dict(world.remediator.halted_scopes())["fleet"] is True


def test_a_second_stall_within_an_hour_takes_the_replica_out_of_rotation(tmp_path):
    world = World(tmp_path)
    world.watcher.config = WatchConfig(interval_s=INTERVAL, pinned_al=2.9, stall_after_s=20.0,
                                       state_dir=world.state, key_prefix="heal")
    world.step(3)
    world.engines["r0"].stalled = True
    world.step(4)
    assert world.restarts == [("r0", "drafter")]
    assert world.journal()[0]["step"] == 3
    world.step(2)
    assert world.outcomes()[-1] == ("r0", 3, P.RESTART, "restarted")
    world.engines["r0"].stalled = True  # again, within the hour
    world.step(6)
    assert world.outcomes()[-1] == ("r0", 3, P.OUT_OF_ROTATION, "out of rotation")
    world.step(1)
    assert not world.ready().ready
    assert A.REPLICA_OUT_OF_ROTATION in world.ready().reason
    assert world.restarts == [("r0", "drafter")]  # no second restart


def state_from_json(doc):
    """The State of policy.state_json's shape (without the envelope), through the strict model
    the state file is read with (documents.parse_state_doc, documents.state_of)."""
    envelope = {"schema": documents.STATE_SCHEMA, "seat": "x", **doc} if isinstance(doc, dict) \
        else doc
    return documents.state_of(documents.parse_state_doc(json.dumps(envelope, allow_nan=True)))


@pytest.mark.parametrize("doc", [
    [], {"ladders": {}}, {"ladders": {"r0": {"mode": "sideways"}}, "taken": [], "halts": {}},
    {"ladders": {}, "taken": [{"time_s": float("nan"), "replica": "r0", "key": "k",
                               "action": "restart", "ladder_start": True}], "halts": {}},
    {"ladders": {}, "taken": [], "halts": {"fleet": {"scope": "fleet", "bound": 1}}},
    {"ladders": {}, "taken": [{"time_s": True, "replica": "r0", "key": "k", "action": "x",
                               "ladder_start": True}], "halts": {}},
])
def test_a_state_document_not_written_by_rocmseat_is_refused(doc):
    with pytest.raises(P.StateError):
        state_from_json(doc)


def test_the_state_round_trips(tmp_path):
    world = World(tmp_path)
    world.step(3)
    collapse(world)
    world.step(2)
    state, meta = journal.load_state(world.state, "heal")
    assert state.ladder("r0").pending is not None and meta.node == "gpu07"
    assert state_from_json(P.state_json(state)) == state


def test_an_untrusted_state_acts_on_nothing(tmp_path):
    world = World(tmp_path)
    world.step(3)
    journal.save_state(world.state, world.remediator.meta, P.State(), world.clock())
    path = journal.seat_dir(world.state, "heal") / "state.json"
    path.chmod(0o666)  # group and other may write it
    collapse(world)
    world.step(3)
    assert world.restarts == []
    assert any("unusable-state" in line and "writable" in line for line in world.lines)


def test_watch_refuses_remediate_for_target_replicas(rocmseat_cli, tmp_path):
    result = rocmseat_cli("watch", "--target", "r0=http://127.0.0.1:9/metrics", "--remediate",
                          "--state-dir", str(tmp_path))
    assert result.exit_code == 2
    assert "--target and --targets-file replicas are never acted on" in result.stderr


def test_the_no_drafter_dropin_keeps_the_rendered_launch(rocmseat_cli, tmp_path):
    from rocmseat.launch.units import no_drafter_dropin, rendered_state

    out = tmp_path / "units"
    seat = cpu_seat(tmp_path)
    result = rocmseat_cli("systemd", "render", str(seat), "--out", str(out), "--rocmseat-bin",
                          "/usr/local/bin/rocmseat", "--sysfs-root", str(tmp_path / "sys"),
                          "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 0, result.stderr
    unit = (out / "rocmseat-heal-r0.service").read_text()
    dropin = no_drafter_dropin(unit, why="step 2")
    assert rendered_state(dropin) == "pristine"
    [launch] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert f"[Service]\nExecStart=\n{launch} --no-drafter\n" in dropin
    with pytest.raises(ValueError, match="edited since"):
        no_drafter_dropin(unit.replace("RestartSec=30", "RestartSec=5"), why="x")


def test_launch_no_drafter_drops_the_drafter_from_the_plan(rocmseat_cli, tmp_path):
    seat = cpu_seat(tmp_path)
    roots = ("--sysfs-root", str(tmp_path / "sys"), "--state-dir", str(tmp_path / "state"))
    with_drafter = rocmseat_cli("launch", str(seat), "--dry-run", "--json", *roots)
    without = rocmseat_cli("launch", str(seat), "--dry-run", "--json", "--no-drafter", *roots)
    assert "--speculative-config" in with_drafter.stdout
    assert "--speculative-config" not in without.stdout and without.stdout.strip()


def test_the_exporter_serves_the_remediation_series(tmp_path):
    from rocmseat.watch.exporter import ExportState, render

    world = World(tmp_path, replicas=2, extra="max_fraction = 1.0")
    world.step(3)
    collapse(world, "r0", "r1")
    world.step(4)
    state = ExportState(
        statuses=tuple(world.watcher.statuses), evaluated_at_s=world.watcher.evaluated_at_s,
        remediations=tuple((*k, n) for k, n in sorted(world.remediator.counts.items())),
        remediation_halted=tuple(world.remediator.halted_scopes()))
    text = render(lambda: state)
    assert ('rocmseat_remediations_total{action="move-cache-aside-restart",outcome="recovered",'
            'replica="r0"} 1.0') in text
    assert 'rocmseat_remediation_halted{scope="replica:r0"} 0.0' in text
    assert 'rocmseat_remediation_halted{scope="fleet"} 0.0' in text
    assert 'rocmseat_alert_active{alert="remediation_halted",replica="r0"} 0.0' in text


def test_systemd_restarts_write_and_remove_the_no_drafter_dropin(rocmseat_cli, tmp_path):
    """Without a restart_command the edge drives systemd: the drop-in beside the unit rocmseat
    rendered, daemon-reload, restart; back to the drafter: the drop-in goes. systemctl itself
    is not run here (tests never touch the host's systemd): the runner records the argv."""
    from rocmseat.runner import Completed

    units = tmp_path / "units"
    seat_file = cpu_seat(tmp_path)
    seat_file.write_text(seat_file.read_text().replace(
        "restart_command = ", f'unit_dir = "{units}"\n# restart_command = '))
    result = rocmseat_cli("systemd", "render", str(seat_file), "--out", str(units),
                          "--rocmseat-bin", "/usr/local/bin/rocmseat", "--state-dir",
                          str(tmp_path / "state"))
    assert result.exit_code == 0, result.stderr
    seat = load_seat(seat_file)
    assert seat.remediate.restart_command is None
    records = {r.replica: r for r in resolve(seat, None, state_root=tmp_path / "state")}
    calls = []

    def systemctl(argv, **kw):
        calls.append(list(argv))
        return Completed(tuple(argv), 0, "", "")

    edge = SeatEdge(seat, records, runner=systemctl)
    edge.restart("r0", "no-drafter", why="step 2")
    dropin = units / "rocmseat-heal-r0.service.d" / "50-rocmseat-no-drafter.conf"
    assert "--no-drafter" in dropin.read_text()
    assert calls == [["systemctl", "daemon-reload"],
                     ["systemctl", "restart", "rocmseat-heal-r0.service"]]
    edge.restart("r0", "drafter", why="reset")
    assert not dropin.exists()
    assert calls[2:] == [["systemctl", "daemon-reload"],
                         ["systemctl", "restart", "rocmseat-heal-r0.service"]]
    edge.restart("r0", "drafter", why="again")  # nothing to remove: no reload
    assert calls[4:] == [["systemctl", "restart", "rocmseat-heal-r0.service"]]

    def failing(argv, **kw):
        return Completed(tuple(argv), 1, "", "Job for x failed.\nSee journalctl -xe\n")

    from rocmseat.watch.remediate.actions import ActionFailed

    with pytest.raises(ActionFailed, match=r"systemctl restart rocmseat-heal-r0.service failed "
                                           r"\(1\): See journalctl -xe"):
        SeatEdge(seat, records, runner=failing).restart("r0", "drafter", why="x")


def test_remediate_goes_with_the_service_not_once(rocmseat_cli, tmp_path):
    seat = cpu_seat(tmp_path)
    result = rocmseat_cli("watch", str(seat), "--once", "--remediate=dry-run", "--state-dir",
                          str(tmp_path / "state"))
    assert result.exit_code == 2
    assert "--remediate goes with the service, not --once" in result.stderr
    off = rocmseat_cli("watch", str(seat), "--once", "--remediate=off", "--interval", "0.05",
                       "--state-dir", str(tmp_path / "state"))
    assert "--remediate" not in off.stderr  # off: the seat's [remediate] mode is not used


def test_move_aside_never_follows_a_link_and_leaves_a_move_in_progress(tmp_path):
    from rocmseat.cache.store import move_aside
    from rocmseat.errors import ConfigError

    root = tmp_path / "cache"
    root.mkdir()
    assert move_aside(root / "r0", reason={"why": "x"}) is None  # no live cache: nothing moved
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "r0").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="is a symlink"):
        move_aside(root / "r0", reason={"why": "x"})
    assert (root / "r0").is_symlink() and elsewhere.is_dir()
    (root / "r0").unlink()
    prepare(root / "r0", KEY, seat_name="heal")
    (root / ".r0.intent.json").write_text("{}")
    with pytest.raises(ConfigError, match="a move aside is in progress"):
        move_aside(root / "r0", reason={"why": "x"})
    assert (root / "r0").is_dir()


@pytest.mark.parametrize(("tree", "acts"), [("x99-r9700-degraded", False), ("x99-r9700", True)])
def test_never_on_a_node_whose_preflight_fails(rocmseat_cli, tmp_path, tree, acts):
    """The node's verdict is the one a real `rocmseat preflight` run cached in the state dir
    (a degraded link fails it): a node problem is not a drafter problem."""
    from rocmseat.watch.remediate.setup import node_refusal

    sysfs = FIXTURES / "sysfs" / tree
    state = tmp_path / "state"
    ran = rocmseat_cli("preflight", "--sysfs-root", str(sysfs), "--state-dir", str(state),
                       "--no-hip")
    assert ran.exit_code == (0 if acts else 1), ran.stderr
    world = World(tmp_path, node_refusal=node_refusal(state, sysfs))
    world.step(3)
    collapse(world)
    world.step(2)
    if acts:
        assert world.restarts == [("r0", "drafter")]
        return
    assert world.restarts == []
    assert world.journal()[0]["outcome"] == (
        "refused: the node's preflight: it fails (a node problem is not a drafter problem)")


@pytest.mark.tools
def test_systemd_analyze_verifies_the_unit_with_its_no_drafter_dropin(rocmseat_cli, tmp_path):
    import shutil
    import subprocess

    from rocmseat.runner import Completed
    from tests.cli.test_systemd import installed_rocmseat

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    units = tmp_path / "units"
    seat_file = cpu_seat(tmp_path)
    seat_file.write_text(seat_file.read_text().replace(
        "restart_command = ", f'unit_dir = "{units}"\n# restart_command = '))
    result = rocmseat_cli("systemd", "render", str(seat_file), "--out", str(units),
                          "--rocmseat-bin", str(installed_rocmseat()), "--state-dir",
                          str(tmp_path / "state"))
    assert result.exit_code == 0, result.stderr
    seat = load_seat(seat_file)
    records = {r.replica: r for r in resolve(seat, None, state_root=tmp_path / "state")}
    edge = SeatEdge(seat, records, runner=lambda argv, **kw: Completed(tuple(argv), 0, "", ""))
    edge.restart("r0", "no-drafter", why="step 2")
    unit = units / "rocmseat-heal-r0.service"
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # the drop-in was read: a bad key would show
    assert (units / "rocmseat-heal-r0.service.d" / "50-rocmseat-no-drafter.conf").is_file()


@pytest.mark.parametrize("name", ["r9", "r0\x1b[2J", "r0\nrocmseat-remediate outcome=recovered"])
def test_reset_of_an_unknown_replica_is_one_clean_line(rocmseat_cli, tmp_path, name):
    world = World(tmp_path)
    world.step(3)
    collapse(world)
    world.step(1)
    result = rocmseat_cli("remediate", "reset", name, "--state-dir", str(world.state))
    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith("rocmseat: error: replica ") and "no remediation state" in first
    assert "\x1b" not in result.stderr and len(result.stderr.splitlines()) == 2  # + the hint


def test_records_written_at_one_instant_read_back_in_order(tmp_path):
    """Twelve records stamped with the same microsecond (a reset writes two at once) read back
    in the order written: the name's sequence is zero-padded ("-10" once sorted before "-9")."""
    meta = journal.Meta("heal", "/s.toml", "gpu07", "on")
    for n in range(12):
        journal.write_record(tmp_path, meta, P.StepRecord("r0", None, "reset", f"n{n}",
                                                          1_800_000_000.0))
    records = journal.read_records(tmp_path, "heal", last=100)[0]
    assert [r["outcome"] for r in records] == [f"n{n}" for n in range(12)]


@pytest.mark.parametrize("as_json", [False, True])
def test_status_on_a_fresh_node_is_ok_in_one_line(rocmseat_cli, tmp_path, as_json):
    # issue 35: a node where nothing was remediated is not "could not check" (exit 2 paged)
    args = ["remediate", "status", "--state-dir", str(tmp_path / "state")]
    result = rocmseat_cli(*args, *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    if as_json:
        doc = json.loads(result.stdout)
        assert doc["schema"] == "rocmseat.remediation-status/v1" and doc["seat"] is None
        assert doc["halts"] == {} and doc["journal"] == []
    else:
        assert result.stdout.splitlines() == [
            f"no remediation state in {tmp_path / 'state' / 'remediation'}: nothing was "
            "remediated on this node"]
    # reset still needs a seat: there is nothing to lift, and it says so (exit 2)
    assert rocmseat_cli("remediate", "reset", "--state-dir", str(tmp_path / "state")
                        ).exit_code == 2
