"""Issue 18's hostile battery extended to targets files, seeded and bounded.

Each case is one file (JSON or YAML, the shapes Prometheus's file_sd reads) built from a valid
document with one hostile change. A case that must be refused is refused by the reader at start
(a ConfigError or ReadError: one line naming the file, exit 2 from `rocmseat watch`) and by a
re-read in a running watcher (the last good set kept, said once); a case that may be accepted
(credentials in meta labels, aliases within bounds, a `seat` label) loads with every secret
redacted from what is shown. For every case: no internal error (exit 3), no hang, no secret in
any message, no control character in any accepted label: never a target set out of a forged file.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

from rocmseat.errors import ConfigError, ReadError
from rocmseat.watch.filesd import TargetsFile, read_targets_file
from tests.conftest import battery_rounds

SEED = 18
COUNT = battery_rounds(60, 150)
SECRET = "hunter2-s3cr3t"
CASE_BOUND_S = 60.0  # a hang, not a speed target (0.5 s alone; CI runs it beside the engine)
CONTROLS = ["\x00", "\x1b", "\x07", "\x7f", "\x9b", "\x85", "\u2028", "\u2029", "\n", "\r"]


def _valid(rng):
    groups = []
    for g in range(rng.randint(1, 4)):
        groups.append({"targets": [f"10.0.{g}.{i}:{8000 + i}" for i in range(rng.randint(1, 3))],
                       "labels": {"zone": f"z{g}", "rack": str(rng.randint(1, 40))}})
    return groups


def _refused(rng):
    """(kind, file name, bytes) of a file that must be refused."""
    doc = _valid(rng)
    group = doc[rng.randrange(len(doc))]
    kind = rng.choice(["control", "surrogate", "long-value", "label-name", "reserved",
                       "unknown-key", "not-host-port", "userinfo-target", "scheme", "not-list",
                       "duplicate-name", "yaml-twice", "yaml-python-tag", "yaml-anchor-bomb",
                       "deep", "not-utf8", "too-big", "path-param", "yaml-binary-bad"])
    name = "t.json"
    text = None
    if kind == "control":
        group["labels"]["zone"] = f"a{rng.choice(CONTROLS)}b{SECRET}"
        if rng.random() < 0.5:
            name = "t.yml"
            text = _yaml_quoted(doc)
    elif kind == "surrogate":
        text = json.dumps(doc).replace('"z', '"\\ud800z', 1)
    elif kind == "long-value":
        group["labels"]["zone"] = "v" * rng.randint(1025, 5000)
    elif kind == "label-name":
        group["labels"][rng.choice(["bad-name", "1x", "a.b", "é", ""])] = "x"
    elif kind == "reserved":
        group["labels"][rng.choice(["alertname", "severity", "source", "alert",
                                    "position"])] = "x"
    elif kind == "unknown-key":
        group["extra"] = SECRET
    elif kind == "not-host-port":
        group["targets"].append(rng.choice(["http://h:1/x", "h:99999", "h:1/metrics", "",
                                            "h h:1", "h:1?x=1"]))
    elif kind == "userinfo-target":
        group["targets"].append(f"admin:{SECRET}@10.9.9.9:8000")
    elif kind == "scheme":
        group["labels"]["__scheme__"] = rng.choice(["ftp", "file", "HTTP ", "gopher"])
    elif kind == "not-list":
        text = json.dumps(group)
    elif kind == "duplicate-name":
        doc.append(dict(doc[0]))
    elif kind == "yaml-twice":
        name = "t.yml"
        text = "- targets: ['h:1']\n  labels: {zone: a, zone: b}\n"
    elif kind == "yaml-python-tag":
        name = "t.yml"
        text = f"- !!python/object/apply:os.system ['echo {SECRET}']\n"
    elif kind == "yaml-anchor-bomb":
        name = "t.yml"
        # 2,000,000 labels in all past 1,000 x 2,000: refused before the work is done
        labels = "\n".join(f"    l{i}: v{i}" for i in range(2000))
        text = (f"- targets: ['h0:1']\n  labels: &L\n{labels}\n"
                + "".join(f"- {{targets: ['h{i}:1'], labels: *L}}\n"
                          for i in range(1, rng.randint(1020, 1500))))
    elif kind == "deep":
        name = rng.choice(["t.json", "t.yml"])
        depth = rng.randint(2000, 20_000)
        text = "[" * depth + "]" * depth
    elif kind == "not-utf8":
        raw = bytearray(json.dumps(doc).encode())
        raw[rng.randrange(len(raw))] = rng.choice([0xff, 0xc0, 0x80, 0xfe])
        return kind, name, bytes(raw)
    elif kind == "too-big":
        text = json.dumps(doc) + " " * ((1 << 20) + 1)
    elif kind == "path-param":
        group["labels"]["__metrics_path__"] = rng.choice(["metrics", "x/y", "metrics?x"])
    elif kind == "yaml-binary-bad":
        name = "t.yml"
        text = "- targets: ['h:1']\n  labels: {zone: !!binary '////'}\n"
    if text is None:
        text = json.dumps(doc)
    return kind, name, text.encode("utf-8", "surrogatepass")


def _yaml_quoted(doc):
    import yaml

    return yaml.safe_dump(doc, allow_unicode=False)  # controls written as "\\x.." escapes


def _accepted(rng):
    """(kind, file name, bytes) of a file that loads: the reader must show no secret."""
    doc = _valid(rng)
    group = doc[rng.randrange(len(doc))]
    kind = rng.choice(["secret-params", "userinfo-in-label", "seat-label", "aliases",
                       "yaml-scalars", "empty-values"])
    name = "t.json"
    text = None
    if kind == "secret-params":
        for param in rng.sample(["pass", "apitoken", "jwt", "token", "password", "api_key",
                                 "session", "auth"], 3):
            group["labels"][f"__param_{param}"] = SECRET
        group["labels"]["__param_shard"] = "2"
    elif kind == "userinfo-in-label":
        group["labels"]["dashboard"] = f"https://admin:{SECRET}@grafana.example/d/1"
    elif kind == "seat-label":
        group["labels"]["seat"] = "qwen-mxfp4"
    elif kind == "aliases":
        name = "t.yml"
        labels = "\n".join(f"    l{i}: v{i}" for i in range(rng.randint(10, 200)))
        text = (f"- &g\n  targets: []\n  labels:\n{labels}\n"
                + "- *g\n" * rng.randint(100, 5_000)
                + "".join(f"- {{targets: ['h{i}:1'], labels: {{zone: z}}}}\n"
                          for i in range(rng.randint(1, 50))))
    elif kind == "yaml-scalars":
        name = "t.yml"
        text = "- targets: ['h:1']\n  labels: {rack: 12, ver: 1.50, on: yes, n: ~, e: ''}\n"
    elif kind == "empty-values":
        group["labels"]["zone"] = None
    if text is None:
        text = json.dumps(doc)
    return kind, name, text.encode()


def _bounded(call):
    box = []

    def run():
        try:
            box.append(("ok", call()))
        except (ConfigError, ReadError) as exc:
            box.append(("refused", exc))
        except BaseException as exc:  # exit 3
            box.append(("internal", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(CASE_BOUND_S)
    return ("hang", None) if thread.is_alive() else box[0]


def _no_secret(text, where):
    assert SECRET not in text, f"{where}: {text[:300]!r}"


def test_forged_targets_files(tmp_path, rocmseat_cli, capsys):
    rng = random.Random(SEED)
    tally: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    commands = 0
    for index in range(COUNT):
        must_refuse = index % 3 != 0
        kind, name, data = _refused(rng) if must_refuse else _accepted(rng)
        case = tmp_path / f"c{index}"
        case.mkdir()
        path = case / name
        path.write_bytes(data)
        where = f"case {index} ({kind})"
        tally[kind] += 1
        started = time.monotonic()
        result, value = _bounded(lambda p=path: read_targets_file(p))
        slowest = max(slowest, time.monotonic() - started)
        outcomes[result] += 1
        assert result not in ("hang", "internal"), f"{where}: {result} {value!r}"
        if must_refuse:
            assert result == "refused", f"{where}: accepted {value!r}"[:400]
            message = value.message
            assert "\n" not in message and str(path) in message, f"{where}: {message!r}"
            _no_secret(message, where)
            # the command (every other case: the reader is the same): one line, exit 2,
            # before any scrape
            cli = None if index % 2 else rocmseat_cli(
                "watch", "--targets-file", str(path), "--once", "--state-dir", str(case / "s"))
            if cli is not None:
                commands += 1
                assert cli.exit_code == 2 and cli.stdout == "", f"{where}: {cli}"
                _no_secret(cli.stderr, where)
            # a running watcher re-reading it keeps its targets and says why once
            running = case / f"running{path.suffix}"
            running.write_text(json.dumps([{"targets": ["127.0.0.1:9"]}]))  # JSON is YAML too
            source = TargetsFile(running)
            source.load()
            running.write_bytes(data)
            said = [source.poll(), source.poll(), source.poll()]
            assert all(r.targets is None for r in said), where
            errors = [r.error for r in said if r.error]
            assert len(errors) == 1, f"{where}: {said}"
            _no_secret(errors[0], where)
        else:
            assert result == "ok" and value, f"{where}: {value!r}"
            for target in value:
                _no_secret(target.shown_url, where)
                for key, label in target.labels:
                    _no_secret(label, where)
                    assert not any(c in label for c in CONTROLS), f"{where}: {key}={label!r}"
    with capsys.disabled():
        print(f"\ntargets-file battery (seed {SEED}): {COUNT} cases, "
              f"{dict(sorted(tally.items()))}; outcomes {dict(outcomes)}; {commands} through the "
              "command, all exit 2; 0 exit 3, 0 hangs, "
              f"0 forged files accepted; slowest {slowest:.2f} s")
    assert len(tally) >= 18  # the seed reaches most kinds
