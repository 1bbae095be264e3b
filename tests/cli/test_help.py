"""The command tree as a user meets it: `--json` always prints a document, every `--help` ends
with examples, and every flag in `--help` is in docs/ (and every flag in docs/ exists)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator

import click
import pytest

from rocmseat.cli.examples import EXAMPLES
from rocmseat.cli.main import COMMANDS, cli
from rocmseat.cli.options import JSON_SCHEMAS
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES


def walk() -> Iterator[tuple[str, click.Command]]:
    """(command path, command) of every command and group under `rocmseat`."""
    ctx = click.Context(cli, info_name="rocmseat")

    def visit(path: str, command: click.Command) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                yield from visit(f"{path} {name}", sub)

    yield from visit("rocmseat", cli)


def _prints_json(command: click.Command) -> bool:
    for param in command.params:
        if "--json" in getattr(param, "opts", ()):
            return True
        if isinstance(param, click.Option) and isinstance(param.type, click.Choice) and \
                "--format" in param.opts and "json" in param.type.choices:
            return True
    return False


def test_every_command_with_json_has_its_schema():
    with_json = {path for path, command in walk() if _prints_json(command)}
    # a key may name a flag after the command path: the command's other document
    assert with_json == {key.split(" --")[0] for key in JSON_SCHEMAS}
    assert {path.split()[1] for path in with_json} <= set(COMMANDS)


@pytest.mark.parametrize(
    ("args", "schema"),
    [
        (["preflight", "--sysfs-root", str(SYSFS_FIXTURES / "no-amdgpu"), "--json"],
         "rocmseat.preflight/v1"),
        (["preflight", "--sysfs-root", str(SYSFS_FIXTURES / "no-amdgpu"), "--format", "json"],
         "rocmseat.preflight/v1"),
        (["key", "{missing}", "--json"], "rocmseat.key/v1"),
        (["cache-audit", "{missing}", "--json"], "rocmseat.cache-audit/v1"),
        (["launch", "{missing}", "--dry-run", "--json"], "rocmseat.launch-plan/v1"),
        (["watch", "{missing}", "--once", "--json"], "rocmseat.watch/v1"),
        (["spec", "advise", "{missing}", "--json"], "rocmseat.advise/v1"),
        (["spec", "gate", "{missing}", "{missing}", "--json"], "rocmseat.gate/v1"),
        (["spec", "gate", "{missing}", "{missing}", "--interleave", "--json"],
         "rocmseat.gate-interleave/v1"),
        (["demo", "models", "{dest}", "--python", "{missing}", "--json"],
         "rocmseat.demo-models/v1"),
        (["remediate", "status", "--seat", "{missing}", "--json"],
         "rocmseat.remediation-status/v1"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(a for a in v if "{" not in a),
)
def test_json_prints_a_document_when_the_command_could_not_check(rocmseat_cli, tmp_path, args,
                                                                 schema):
    """Issue 19: `--json` always prints a JSON document, with `schema` and `error` when it
    could not check (it printed nothing), the exit code unchanged."""
    argv = [a.format(missing=tmp_path / "missing.toml", dest=tmp_path / "models") for a in args]
    result = rocmseat_cli(*argv, "--state-dir", str(tmp_path / "s")) if argv[0] in (
        "preflight", "key", "cache-audit", "watch") else rocmseat_cli(*argv)
    assert result.exit_code in (1, 2)
    doc = json.loads(result.stdout)
    assert doc["schema"] == schema and doc["exit_code"] == result.exit_code
    assert result.stderr.startswith(f"rocmseat: error: {doc['error']}\n")


def test_a_usage_error_prints_no_document(rocmseat_cli):
    result = rocmseat_cli("key", "--json", "--no-such-flag")
    assert result.exit_code == 2 and result.stdout == ""


# --- issue 19: help and flags ----------------------------------------------------------------
COMMAND_PATHS = [path for path, _command in walk()]
DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
# Flags the docs name that belong to other programs (the tool each is for).
FOREIGN_FLAGS = {
    # vllm serve / vllm bench serve (the engine's own arguments, in seats' extra_args)
    "--api-key": "vllm", "--compilation-config": "vllm", "--disable-log-stats": "vllm",
    "--dtype": "vllm", "--enable-logging-iteration-details": "vllm",
    "--gpu-memory-utilization": "vllm", "--hf-token": "vllm", "--host": "vllm", "--port": "vllm",
    "--max-model-len": "vllm", "--max-num-batched-tokens": "vllm", "--model": "vllm",
    "--quantization": "vllm", "--served-model-name": "vllm", "--speculative-config": "vllm",
    "--tensor-parallel-size": "vllm", "--tokenizer": "vllm", "--ignore-eos": "vllm bench",
    "--save-result": "vllm bench", "--temperature": "vllm bench",
    "--save-detailed": "vllm bench",
    "--draft-max": "llama-server before 2026 (docs/engines.md)",
    "--model-draft": "llama-server before 2026 (docs/engines.md)",
    "--db-password": "an example secret flag (docs/cache.md)", "--name": "an example flag",
    "--compilation": "the prefix of vllm's --compilation_config spelling",
    "--cpunodebind": "numactl", "--membind": "numactl", "--now": "systemctl",
    "--agent": "prometheus", "--collector.textfile.directory": "node_exporter",
    "--check": "tests/fixtures/build_sysfs_fixtures.py", "--hostile": "bench/bench_preflight.py",
    "--rounds": "the hostile batteries (tests/*/hostile.py, tests/fleet/verdict_battery.py)",
    "--update-golden": "pytest (tests/conftest.py)",
    "--per-request-spec-decode-metrics": "vllm (the drafter canary, docs/seat.md)",
    "--cpuset-cpus": "docker (docs/launch.md, Containers)", "--cpuset-mems": "docker",
    "--device": "docker", "--ipc": "docker", "--entrypoint": "podman/docker run",
    "--env": "podman/docker run", "--group-add": "podman/docker run",
    "--network": "podman/docker run", "--replace": "podman run", "--rm": "podman/docker run",
    "--security-opt": "podman/docker run", "--sig-proxy": "podman/docker run",
    "--volume": "podman/docker run",
    "--find-links": "pip (docs/install.md)", "--no-index": "pip",
    "--gates": "bench/bench_advise.py", "--metrics-format": "bench/bench_preflight.py",
    "--against": "bench/bench_watch_fleet.py",
    # python -m sglang.launch_server (docs/engines.md; tests/fixtures/engines/sglang-*-flags.txt)
    **dict.fromkeys(("--chunked-prefill-size", "--context-length", "--enable-metrics",
                     "--max-running-requests", "--mem-fraction-static", "--model-path",
                     "--speculative-algorithm", "--speculative-draft-model-path",
                     "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                     "--speculative-num-steps", "--tp-size"), "sglang"),
    # llama-server (docs/engines.md, common/arg.cpp)
    **dict.fromkeys(("--alias", "--batch-size", "--ctx-size", "--metrics", "--n-gpu-layers",
                     "--parallel", "--spec-draft-model", "--spec-draft-n-max",
                     "--spec-draft-ngl", "--spec-type"), "llama-server"),
}
FLAG_RE = re.compile(r"(?<![\w/.-])--[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*")


def _command(path: str) -> click.Command:
    return dict(walk())[path]


def _help(rocmseat_cli, path: str) -> str:
    result = rocmseat_cli(*path.split()[1:], "--help")
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _flags(command: click.Command) -> set[str]:
    flags = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            flags.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return flags


def _resolve(tokens: list[str]) -> tuple[str, list[str]]:
    """The longest command path `tokens` start with (after "rocmseat"), and the rest."""
    path, rest = "rocmseat", tokens[1:]
    while rest and f"{path} {rest[0]}" in COMMAND_PATHS:
        path, rest = f"{path} {rest[0]}", rest[1:]
    return path, rest


@pytest.mark.parametrize("path", COMMAND_PATHS)
def test_every_help_ends_with_two_to_four_real_examples(rocmseat_cli, monkeypatch, path):
    monkeypatch.setenv("COLUMNS", "100")
    text = _help(rocmseat_cli, path)
    assert "\n  Examples:\n" in text, text
    examples = text.split("\n  Examples:\n", 1)[1].strip("\n").splitlines()
    assert 2 <= len(examples) <= 4, examples
    for example in examples:
        assert example.startswith("    rocmseat ") and len(example) <= 80, example
        command_path, rest = _resolve(shlex.split(example.split("  #")[0]))
        # an example of this command (a group's may show its subcommands)
        assert command_path == path or command_path.startswith(path + " "), example
        unknown = {t.split("=")[0] for t in rest if t.startswith("--")} - _flags(
            _command(command_path))
        assert not unknown, f"{example}: {sorted(unknown)} are not options of {command_path}"


@pytest.mark.parametrize("path", COMMAND_PATHS)
def test_optional_positionals_are_shown_optional(rocmseat_cli, path):
    usage = _help(rocmseat_cli, path).splitlines()[0]
    for param in _command(path).params:
        if isinstance(param, click.Argument):
            metavar = param.make_metavar(click.Context(_command(path)))
            if param.required:
                assert not metavar.startswith("["), usage
            else:
                assert metavar.startswith("["), f"{usage}: {param.name} is optional"


# click's own "[default: X]" (or "[env var: E; default: X]", "[default: X; 1<=x<=5]") at the end
DEFAULT_RE = re.compile(r"\s*\[(?:env var: [^;\]]*; )?default: (.*?)(?:; [^\]]*)?\]\.?$")


def _default_text(command: click.Command, option: click.Option) -> str | None:
    """What `--help` says the default is (click's "[default: X]"), or None."""
    record = option.get_help_record(click.Context(command))
    if record is None:
        return None
    found = DEFAULT_RE.search(record[1])
    return found.group(1) if found else None


def _options() -> Iterator[tuple[str, click.Command, click.Option]]:
    for path, command in walk():
        for param in command.params:
            if isinstance(param, click.Option):
                yield path, command, param


def test_defaults_are_said_in_one_style():
    """`[default: X]` at the end of the help (click's own style), never "(default X)" or
    "[30]"."""
    odd = []
    for path, command, option in _options():
        record = option.get_help_record(click.Context(command))
        text = record[1] if record else ""
        body = DEFAULT_RE.sub("", text)
        if re.search(r"\(default\b|\bdefault[: ] |\[\d[\d.]*\]|\[default", body):
            odd.append(f"{path} {option.opts[0]}: {text}")
    assert odd == []


def _effective(default: str) -> str:
    """The built-in default a help states: "[gate] stall_after_s, else 60" -> "60"."""
    value = default.rsplit(", else ", 1)[-1].strip()
    try:
        return f"{float(value):g}"
    except ValueError:
        return value


def test_a_flag_has_one_default_and_one_meaning_across_commands():
    """Issue 19: `--max-age` was 900 in preflight and 600 in `slurm health`, `--stall-after` 60
    in watch and 30 in the gate."""
    seen: dict[str, dict[str, str]] = {}
    for path, command, option in _options():
        default = _default_text(command, option)
        if default is not None:
            seen.setdefault(option.opts[0], {})[path] = _effective(default)
    split = {flag: by for flag, by in seen.items() if len(set(by.values())) > 1}
    assert split == {}


def _docs_text() -> str:
    return "\n".join(p.read_text() for p in DOCS)


def test_every_flag_in_help_is_in_docs():
    docs = set(FLAG_RE.findall(_docs_text()))
    missing = sorted(f"{path} {flag}" for path, command in walk()
                     for flag in _flags(command) - {"--help", "--version"} if flag not in docs)
    assert missing == []


def _invocations() -> Iterator[tuple[str, str]]:
    """(file:line, text) of every `rocmseat CMD ...` the docs show: inline code spans and the
    lines of code blocks, up to a comment or an alternative (`|`)."""
    for doc in DOCS:
        block = False
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            if line.startswith("```"):
                block = not block
                continue
            spans = [line] if block else re.findall(r"`([^`]+)`", line)
            for span in spans:
                for found in re.finditer(r"(?<![\w/-])rocmseat(?= )[^#|`]*", span):
                    yield f"{doc.name}:{number}", found.group(0)


def test_every_flag_the_docs_give_a_command_exists():
    wrong = []
    for where, text in _invocations():
        tokens = text.split()
        path, rest = _resolve(tokens)
        if path == "rocmseat":
            continue  # prose ("rocmseat never ..."), not an invocation
        unknown = {t.split("=")[0].rstrip(",.;:)") for t in rest if FLAG_RE.fullmatch(
            t.split("=")[0].rstrip(",.;:)"))} - _flags(_command(path))
        if unknown:
            wrong.append(f"{where}: {text.strip()} ({', '.join(sorted(unknown))})")
    assert wrong == []


def test_every_flag_in_docs_exists():
    ours = {flag for _path, command in walk() for flag in _flags(command)} | {"--version"}
    strays = sorted(set(FLAG_RE.findall(_docs_text())) - ours - set(FOREIGN_FLAGS))
    assert strays == []


@pytest.mark.parametrize("example", sorted({e for lines in EXAMPLES.values() for e in lines}))
def test_every_example_parses(example):
    """An example is a real invocation: click's own parser of its command takes it (types,
    ranges and callbacks such as --pair's), it is only not run."""
    path, rest = _resolve(shlex.split(example))
    command = _command(path)
    if isinstance(command, click.Group):
        pytest.skip("a group's example is its subcommand's")
    with command.make_context(path, rest) as ctx:
        assert ctx.params is not None
