"""`rocmseat demo models`: the library with an injected runner, the CLI's errors, and (engine
tier) the real builder run by the engine's Python."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from rocmseat.demo import BUILDER, MODEL_NAMES, build_models, parse_build_report
from rocmseat.errors import ConfigError, RocmseatError
from rocmseat.runner import Completed
from tests.e2e.harness import engine_python_or_skip


def _report(dest: Path) -> str:
    models = {
        name: {
            "seed": 1234 if name != "drafter-other" else 4321,
            "path": str(dest / name),
            "files": {
                "model.safetensors": {"size_bytes": 100, "sha256": name[0] * 64},
                "config.json": {"size_bytes": 7, "sha256": "0" * 64},
            },
        }
        for name in MODEL_NAMES
    }
    return json.dumps({"schema": "rocmseat.demo-models/v1", "models": models})


class FakeRunner:
    """Stands in for the builder: writes the model folders into the directory it is given (as
    build_tiny_models.py does) and prints their report; or fails as told."""

    def __init__(self, returncode: int = 0, stdout: str | None = None, stderr: str = "") -> None:
        self.calls: list[tuple[str, ...]] = []
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __call__(self, argv, *, timeout_s=None, env=None, cwd=None, input_text=None):
        self.calls.append(tuple(argv))
        into = Path(argv[2])
        for name in MODEL_NAMES:  # the real builder makes its folders before it can fail
            (into / name).mkdir()
            if self.returncode == 0:
                (into / name / "model.safetensors").write_bytes(name.encode())
        out = self.stdout if self.stdout is not None else _report(into)
        return Completed(tuple(argv), self.returncode, out, self.stderr)


@pytest.fixture
def python(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "python"
    exe.parent.mkdir()
    exe.write_text("")
    return exe


def test_runs_the_shipped_builder_with_the_engine_python(tmp_path, python):
    runner = FakeRunner()
    built = build_models(tmp_path / "models", python, runner=runner)
    [(exe, builder, into)] = runner.calls
    assert (exe, builder) == (str(python), str(BUILDER))
    # into a temporary directory inside DEST, renamed into place, the temporary one gone
    assert Path(into).parent == tmp_path / "models" and Path(into).name.startswith(".rocmseat-")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == sorted(MODEL_NAMES)
    assert [m.name for m in built] == ["target", "drafter", "drafter-other"]
    assert [m.path for m in built] == [tmp_path / "models" / n for n in MODEL_NAMES]
    assert (tmp_path / "models" / "drafter" / "model.safetensors").read_bytes() == b"drafter"
    assert [m.seed for m in built] == [1234, 1234, 4321]
    assert built[0].size_bytes == 107
    assert built[2].weights_sha256 == "d" * 64


def test_existing_models_are_kept_without_force(tmp_path, python):
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "model.safetensors").write_bytes(b"swapped on purpose")
    runner = FakeRunner()
    with pytest.raises(ConfigError, match="drafter: already exists") as info:
        build_models(tmp_path, python, runner=runner)
    assert info.value.hint and "--force" in info.value.hint
    assert runner.calls == []
    assert (tmp_path / "drafter" / "model.safetensors").read_bytes() == b"swapped on purpose"


def test_force_rebuilds(tmp_path, python):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "stale").write_text("x")
    build_models(tmp_path, python, force=True, runner=FakeRunner())
    assert not (tmp_path / "target" / "stale").exists()
    assert (tmp_path / "target" / "model.safetensors").read_bytes() == b"target"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["bin", *MODEL_NAMES])


def test_a_failed_force_rebuild_keeps_the_old_models(tmp_path, python):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "mine").write_text("x")
    with pytest.raises(RocmseatError):
        build_models(tmp_path, python, force=True, runner=FakeRunner(returncode=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "target"]
    assert (tmp_path / "target" / "mine").read_text() == "x"


def test_missing_engine_python_names_it(tmp_path):
    with pytest.raises(ConfigError, match="nope/python: engine Python not found"):
        build_models(tmp_path / "m", tmp_path / "nope" / "python", runner=FakeRunner())


def test_builder_failure_carries_its_last_line_and_leaves_nothing(tmp_path, python):
    runner = FakeRunner(returncode=1, stdout="", stderr="Traceback...\nOSError: No space left")
    with pytest.raises(RocmseatError, match="exited 1: OSError: No space left") as info:
        build_models(tmp_path / "m", python, runner=runner)
    assert info.value.exit_code == 2
    assert not (tmp_path / "m").exists()  # DEST did not exist: not even it is left
    # and the next run is not refused ("already exists"): the builder is run again
    with pytest.raises(RocmseatError, match="exited 1"):
        build_models(tmp_path / "m", python, runner=runner)
    assert len(runner.calls) == 2


@pytest.mark.parametrize(
    ("returncode", "stderr"),
    [(3, "/usr/bin/python3 has no torch, transformers, tokenizers (the demo model builders "
         "need torch, transformers, tokenizers)"),
     (1, "Traceback...\nModuleNotFoundError: No module named 'torch'")],
)
def test_a_python_without_torch_is_a_usage_error(tmp_path, python, returncode, stderr):
    with pytest.raises(ConfigError, match="not the engine's Python: ") as info:
        build_models(tmp_path, python, runner=FakeRunner(returncode=returncode, stdout="",
                                                         stderr=stderr))
    assert stderr.splitlines()[-1] in info.value.message
    assert info.value.hint and "--python" in info.value.hint
    assert list(tmp_path.iterdir()) == [tmp_path / "bin"]  # nothing left in DEST


def test_a_report_that_does_not_parse_moves_nothing(tmp_path, python):
    with pytest.raises(RocmseatError, match="unexpected report") as info:
        build_models(tmp_path / "m", python, runner=FakeRunner(stdout="not json"))
    assert info.value.exit_code == 2 and not (tmp_path / "m").exists()


def test_cli_a_python_without_torch(rocmseat_cli, tmp_path):
    """The field case: --python names a Python that has no torch (here rocmseat's own). The
    real builder runs, says so, and DEST is left as it was: the next run is not refused."""
    import sys

    dest = tmp_path / "models"
    for _ in range(2):
        result = rocmseat_cli("demo", "models", str(dest), "--python", sys.executable)
        assert result.exit_code == 2, result.stderr
        first = result.stderr.splitlines()[0]
        assert first.startswith(f"rocmseat: error: {sys.executable}: not the engine's Python: ")
        assert "has no torch" in first
        assert not dest.exists()


@pytest.mark.parametrize(
    "text",
    ["", "not json", "{}", '{"models": {}}', '{"models": {"target": {"seed": 1}}}', "[1, 2]"],
)
def test_malformed_builder_report(text):
    with pytest.raises(RocmseatError, match="unexpected report"):
        parse_build_report(text)


def test_cli_missing_python_exit_2(rocmseat_cli, tmp_path):
    result = rocmseat_cli("demo", "models", str(tmp_path / "m"), "--python",
                          str(tmp_path / "none"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {tmp_path / 'none'}: engine Python not found")


def test_cli_python_from_env(rocmseat_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMSEAT_VLLM_PYTHON", str(tmp_path / "from-env"))
    result = rocmseat_cli("demo", "models", str(tmp_path / "m"))
    assert result.exit_code == 2
    assert f"{tmp_path / 'from-env'}: engine Python not found" in result.stderr


# ----- the real builder (needs torch + transformers: the engine's venv) -------------------------
def _header(path: Path) -> bytes:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return data[8 : 8 + length]


@pytest.mark.engine
@pytest.mark.beside  # builds with the engine's Python, starts no engine
def test_real_builder(rocmseat_cli, tmp_path, demo_models: Path, demo_models_report):
    """The session's build (`rocmseat demo models DEST --json`, shared by the engine tier),
    checked, then rebuilt with --force on a copy: the same bytes."""
    python = engine_python_or_skip()
    doc = demo_models_report
    assert doc["schema"] == "rocmseat.demo-models/v1"
    assert [m["path"] for m in doc["models"]] == [str(demo_models / n) for n in MODEL_NAMES]
    sha = {m["name"]: m["weights_sha256"] for m in doc["models"]}
    assert sha["target"] == sha["drafter"] != sha["drafter-other"]

    target, other = demo_models / "target", demo_models / "drafter-other"
    # Same shapes, other weights: what the config key sees is identical (issue 4).
    assert (target / "config.json").read_bytes() == (other / "config.json").read_bytes()
    assert _header(target / "model.safetensors") == _header(other / "model.safetensors")
    config = json.loads((target / "config.json").read_text())
    assert (config["vocab_size"], config["hidden_size"], config["num_attention_heads"]) == (
        256, 256, 4)
    assert config["hidden_size"] // config["num_attention_heads"] >= 32  # vLLM CPU attention

    # The tokenizer round-trips words and fills the whole vocabulary.
    probe = subprocess.run(
        [str(python), "-c",
         "import sys, transformers; t = transformers.AutoTokenizer.from_pretrained(sys.argv[1]); "
         "ids = t('the state of the world')['input_ids']; print(len(t), t.decode(ids), "
         "t.apply_chat_template([{'role': 'user', 'content': 'hello'}], tokenize=False))",
         str(target)],
        capture_output=True, text=True, timeout=300,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split(None, 1)[0] == "256"
    assert "the state of the world" in probe.stdout

    # Deterministic: a second build (--force, over a copy of the first) gives the same bytes.
    copy = tmp_path / "models"
    shutil.copytree(demo_models, copy)
    again = rocmseat_cli("demo", "models", str(copy), "--python", str(python), "--force",
                         "--json")
    assert again.exit_code == 0, again.stderr
    rebuilt = json.loads(again.stdout)
    assert [m["path"] for m in rebuilt["models"]] == [str(copy / n) for n in MODEL_NAMES]
    assert ([{k: v for k, v in m.items() if k != "path"} for m in rebuilt["models"]]
            == [{k: v for k, v in m.items() if k != "path"} for m in doc["models"]])
    assert sorted(p.name for p in copy.iterdir()) == sorted(MODEL_NAMES)  # nothing left over


# ----- the speculation demo models (rocmseat demo spec-models) -------------------------------
def _spec_report(dest: Path, eps: tuple[float, ...]) -> str:
    from rocmseat.demo import spec_target_name

    models = {"spec-drafter": {"path": str(dest / "spec-drafter"), "layers": 1,
                               "files": {"model.safetensors": {"size_bytes": 13, "sha256": "a"}}}}
    for e in eps:
        models[spec_target_name(e)] = {
            "path": str(dest / spec_target_name(e)), "eps": e, "offline_agreement": 1.0 - e,
            "layers": 12, "files": {"model.safetensors": {"size_bytes": 145, "sha256": "b"}}}
    return json.dumps({"schema": "rocmseat.demo-spec-models/v1", "models": models})


def test_spec_models_run_the_shipped_builder(tmp_path, python):
    from rocmseat.demo import SPEC_BUILDER, build_spec_models

    class Runner(FakeRunner):
        def __call__(self, argv, **kwargs):
            self.calls.append(tuple(argv))
            into = Path(argv[2])
            for name in ("spec-drafter", "spec-target-e0200", "spec-target-e0500"):
                (into / name).mkdir()
            return Completed(tuple(argv), 0, _spec_report(into, (0.02, 0.05)), "")

    runner = Runner()
    built = build_spec_models(tmp_path, python, eps=(0.02, 0.05), prompts=tmp_path / "p.jsonl",
                              runner=runner)
    [call] = runner.calls
    assert call[:2] == (str(python), str(SPEC_BUILDER)) and Path(call[2]).parent == tmp_path
    assert call[3:] == ("--eps", "0.02,0.05", "--prompts", str(tmp_path / "p.jsonl"))
    assert [m.name for m in built] == ["spec-drafter", "spec-target-e0200", "spec-target-e0500"]
    assert [m.path for m in built] == [tmp_path / m.name for m in built]
    assert all(m.path.is_dir() for m in built)
    assert built[0].eps is None and built[2].offline_agreement == 0.95


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "nothing to build"), ({"eps": (1.5,)}, "must lie in 0..1"),
     ({"acceptance": (float("nan"),)}, "must lie in 0..1")],
)
def test_spec_models_refuse_bad_values(tmp_path, python, kwargs, message):
    from rocmseat.demo import build_spec_models

    with pytest.raises(RocmseatError, match=message):
        build_spec_models(tmp_path, python, runner=FakeRunner(), **kwargs)


def test_spec_models_keep_existing_folders(tmp_path, python):
    from rocmseat.demo import build_spec_models

    (tmp_path / "spec-drafter").mkdir()
    with pytest.raises(RocmseatError, match="already exists"):
        build_spec_models(tmp_path, python, eps=(0.02,), runner=FakeRunner())


def test_cli_spec_models_bad_list(rocmseat_cli, tmp_path):
    result = rocmseat_cli("demo", "spec-models", str(tmp_path), "--eps", "0.1,x")
    assert result.exit_code == 2 and "--eps" in result.stderr


def _tensors(path: Path) -> dict[str, bytes]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    return {name: body[t["data_offsets"][0] : t["data_offsets"][1]]
            for name, t in header.items() if name != "__metadata__"}


@pytest.mark.engine
@pytest.mark.beside  # likewise
def test_real_spec_builder(rocmseat_cli, tmp_path):
    """The drafter is the target's first layer with its embeddings, norm and lm_head; eps 0
    zeroes the extra layers' contribution (acceptance 1), eps > 0 does not."""
    python = engine_python_or_skip()
    result = rocmseat_cli("demo", "spec-models", str(tmp_path), "--eps", "0,0.05", "--python",
                          str(python), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    agreement = {m["name"]: m["offline_agreement"] for m in doc["models"]}
    assert agreement["spec-target-e0000"] == 1.0
    assert agreement["spec-target-e0500"] < 1.0
    drafter = _tensors(tmp_path / "spec-drafter" / "model.safetensors")
    config = json.loads((tmp_path / "spec-drafter" / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["hidden_size"] == 768
    for eps in ("e0000", "e0500"):
        target = _tensors(tmp_path / f"spec-target-{eps}" / "model.safetensors")
        assert json.loads((tmp_path / f"spec-target-{eps}" / "config.json").read_text())[
            "num_hidden_layers"] == 12
        for name, raw in drafter.items():
            assert target[name] == raw, name  # layer 0, embeddings, final norm, lm_head
        extra = target["model.layers.5.mlp.down_proj.weight"]
        bf16 = struct.unpack(f"<{len(extra) // 2}H", extra)
        assert all(v & 0x7FFF == 0 for v in bf16) == (eps == "e0000")  # +-0.0 only


# ----- progress on a terminal ------------------------------------------------------------------
def _slow_builder(directory: Path, seconds: float) -> Path:
    """An executable run as `PYTHON BUILDER DEST`: takes `seconds`, then does what the real
    builder does (the folders, the report). Not an engine Python; only a slow builder."""
    import sys

    exe = directory / "slow-python"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, time\n"
        "from pathlib import Path\n"
        f"time.sleep({seconds})\n"
        "into = Path(sys.argv[2])\n"
        "models = {}\n"
        "for name, seed in (('target', 1234), ('drafter', 1234), ('drafter-other', 4321)):\n"
        "    (into / name).mkdir()\n"
        "    (into / name / 'model.safetensors').write_bytes(name.encode())\n"
        "    models[name] = {'seed': seed, 'path': str(into / name), 'files': {\n"
        "        'model.safetensors': {'size_bytes': len(name), 'sha256': name[0] * 64}}}\n"
        "print(json.dumps({'schema': 'rocmseat.demo-models/v1', 'models': models}))\n")
    exe.chmod(0o755)
    return exe


def _run_on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; (exit status, what the terminal showed)."""
    import os
    import pty
    import select
    import sys

    from tests.conftest import REPO

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "rocmseat", *args], stdout=subprocess.PIPE,
                            stderr=follower, env=env, cwd=REPO)
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    proc.wait(30)
    return proc.returncode, shown.decode(errors="replace")


def test_demo_models_show_progress_on_a_terminal(tmp_path):
    import os

    python = _slow_builder(tmp_path, 2.5)
    # COLUMNS: a terminal wide enough for the line whatever the temporary path's length (at 80
    # columns rich wrapped "(2 s)" across two rows under .ci/run's longer --basetemp)
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "400",
           "PYTHONPATH": str(Path(__file__).parents[2])}
    code, shown = _run_on_a_terminal(["demo", "models", str(tmp_path / "m"), "--python",
                                      str(python)], env)
    assert code == 0, shown
    assert f"building the demo models in {tmp_path / 'm'}" in shown
    assert "(2 s)" in shown  # the seconds tick while the builder runs
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == sorted(MODEL_NAMES)


def test_no_progress_off_a_terminal(rocmseat_cli, tmp_path):
    result = rocmseat_cli("demo", "models", str(tmp_path / "m"), "--python",
                          str(_slow_builder(tmp_path, 0)))
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines()[0].startswith(f"target         {tmp_path / 'm' / 'target'}")
