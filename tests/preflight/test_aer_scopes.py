"""One AER baseline per kind of run (issue 13, defect 12): a replica's `--pair` ExecStartPre or an
operator's `--only aer` must never advance the full run's baseline, or the node's cached verdict
(and so Slurm, node-problem-detector and NHC) never sees the errors they saw.

The real flow: a copy of the healthy X99 tree, real `rocmseat preflight` runs through the CLI's
error boundary, the counters grown in the tree's own AER files as the kernel grows them."""

from __future__ import annotations

import json
import re

import pytest

from rocmseat.preflight.aer_state import load_baseline, save_baseline, scope_for, state_path

ROOT_PORT = "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"  # on GPU 86:00.0's path


def _grow(root, badtlp):
    path = root / ROOT_PORT
    text = re.sub(r"(?m)^BadTLP \d+$", f"BadTLP {badtlp}", path.read_text())
    path.write_text(re.sub(r"(?m)^TOTAL_ERR_COR \d+$", f"TOTAL_ERR_COR {badtlp}", text))


@pytest.fixture
def node(rocmseat_cli, copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    state = tmp_path / "state"

    def run(*args):
        return rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir", str(state),
                            *args)

    run.root, run.state = root, state
    return run


def _aer_findings(result):
    doc = json.loads(result.stdout)
    return doc, [(f["check_id"], f["severity"], f["data"].get("delta"))
                 for f in doc["findings"] if f["check_id"].startswith("aer.")
                 and f["severity"] != "ok"]


@pytest.mark.parametrize("partial", [["--pair", "86:00.0,89:00.0"], ["--only", "aer"]])
def test_a_partial_run_does_not_hide_new_errors_from_the_full_run(node, partial):
    assert node("--format", "npd").exit_code == 0  # the periodic full run: the node baseline
    _grow(node.root, 5000)
    result = node(*partial, "--json")
    doc, aer = _aer_findings(result)
    assert result.exit_code == 1 and aer == [("aer.badtlp", "fail", 5000)]
    # its first run counts from the node's baseline, not from boot
    assert doc["aer_window"].startswith("since the node's AER baseline of ")
    # the next full run still sees the 5,000 BadTLPs: its window starts at the last full run
    result = node("--json")
    doc, aer = _aer_findings(result)
    assert result.exit_code == 1 and aer == [("aer.badtlp", "fail", 5000)]
    assert doc["aer_window"].startswith("since the AER baseline of ")
    # and so does every reader of the cached verdict
    cached = node("--format", "npd", "--cached", "--only", "aer")
    assert (cached.exit_code, cached.stdout) == (1, "FAIL aer.badtlp 0000:80:02.0\n")


def test_each_scope_keeps_its_own_window(node):
    node()  # full
    _grow(node.root, 10)
    assert node("--pair", "86:00.0,89:00.0", "--json").exit_code == 0  # 10 BadTLP: a warning
    _, aer = _aer_findings(node("--pair", "86:00.0,89:00.0", "--json"))
    assert aer == []  # the pair's second run: nothing new since its first
    # the other pair's first run sees nothing on its own path
    _, aer = _aer_findings(node("--pair", "05:00.0,09:00.0", "--json"))
    assert aer == []
    _, aer = _aer_findings(node("--json"))
    assert aer == [("aer.badtlp", "warn", 10)]  # the full run: new since the last full run
    _, aer = _aer_findings(node("--json"))
    assert aer == []
    scopes = json.loads(state_path(node.state).read_text())["scopes"]
    assert sorted(scopes) == ["gpus:0000:05:00.0,0000:09:00.0", "gpus:0000:86:00.0,0000:89:00.0",
                              "node"]


def test_a_sample_run_advances_no_baseline(node):
    node()
    before = state_path(node.state).read_bytes()
    _grow(node.root, 7)
    assert node("--sample", "0", "--json").exit_code == 0  # nothing grew during the sample
    assert state_path(node.state).read_bytes() == before
    _, aer = _aer_findings(node("--json"))
    assert aer == [("aer.badtlp", "warn", 7)]


def test_scope_names():
    assert scope_for(None, None) == "node"
    assert scope_for(None, {"aer"}) == "partial"
    assert scope_for([("0000:86:00.0", "0000:89:00.0")], None) == "gpus:0000:86:00.0,0000:89:00.0"


def test_a_baseline_from_another_boot_is_not_used(tmp_path, copy_tree):
    root = copy_tree("x99-r9700")
    boot_a = "2b3c0b52-9a8e-4c1e-9f57-6d2f3a1b0c4d"
    boot_b = "7e1d2c3b-4a59-4687-8b9a-0c1d2e3f4a5b"
    assert save_baseline(tmp_path, root, {"0000:80:02.0": {"correctable.BadTLP": 9}}, "T1",
                         boot_id=boot_a) is None
    assert load_baseline(tmp_path, root, boot_id=boot_a)[0].devices == {
        "0000:80:02.0": {"correctable.BadTLP": 9}}
    # counters restart at boot: after a reboot the old reading would hide what is new
    assert load_baseline(tmp_path, root, boot_id=boot_b) == (None, None)


def test_a_v1_baseline_reads_as_the_node_scope(tmp_path, copy_tree):
    root = copy_tree("x99-r9700")
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "schema": "rocmseat.aer-baseline/v1", "sysfs_root": str(root.resolve()),
        "taken_at": "2026-11-29T10:00:00Z",
        "devices": {"0000:80:02.0": {"correctable.BadTLP": 3}},
    }))
    baseline, problem = load_baseline(tmp_path, root)
    assert problem is None and baseline.taken_at == "2026-11-29T10:00:00Z"
    partial, _ = load_baseline(tmp_path, root, "partial")
    assert partial.from_node and partial.devices == baseline.devices


@pytest.mark.parametrize(
    "doc",
    [
        {"scopes": {"node": {"taken_at": "T", "devices": {"0000:80:02.0": {"a.b": -1}}}}},
        {"scopes": {"node": {"taken_at": "T", "devices": {"0000:80:02.0": {"a.b": 10**30}}}}},
        {"scopes": {"node": {"taken_at": "T\n", "devices": {}}}},
        {"scopes": {"../etc": {"taken_at": "T", "devices": {}}}},
        {"scopes": {"node": {"taken_at": "T", "devices": {"not an address": {}}}}},
        {"scopes": {f"gpus:0000:{i:02x}:00.0": {"taken_at": "T", "devices": {}}
                    for i in range(100)}},
        {"scopes": [], "boot_id": None},
        {"scopes": {}, "boot_id": 7},
    ],
)
def test_hostile_baseline_files_are_one_line_problems(tmp_path, copy_tree, doc):
    root = copy_tree("x99-r9700")
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": "rocmseat.aer-baseline/v2",
                                "sysfs_root": str(root.resolve()), **doc}))
    baseline, problem = load_baseline(tmp_path, root)
    assert baseline is None
    assert problem.startswith(f"{path}: unusable baseline (") and "\n" not in problem


def test_a_fifo_baseline_never_blocks(tmp_path, copy_tree):
    import os
    import threading

    root = copy_tree("x99-r9700")
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    result = []
    worker = threading.Thread(target=lambda: result.append(load_baseline(tmp_path, root)),
                              daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        with open(path, "wb"):  # unblock the reader so the thread can end
            pass
        raise AssertionError("load_baseline blocked on a FIFO")
    ((baseline, problem),) = result
    assert baseline is None and "is a FIFO, not a regular file" in problem
