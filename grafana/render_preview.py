"""Render a picture of grafana/rocmseat-dashboard.json from a real Prometheus (not Grafana).

    PYTHONPATH=. python3 grafana/render_preview.py docs/img/rocmseat-dashboard.png

No Debian, PyPI or npm package brings Grafana or its image renderer, so this plots the same
queries instead: it records three hours of two nodes (gpu-07, gpu-08) with two replicas each,
turns them into TSDB blocks with `promtool tsdb create-blocks-from openmetrics`, backfills the
shipped recording rules with `promtool tsdb create-blocks-from rules`, starts Debian's
`prometheus` on 127.0.0.1 over those blocks, sends every panel's PromQL (variables = All) to
its HTTP API (/api/v1/query_range) and draws the answers with matplotlib at the panels'
gridPos, legends formatted from each target's legendFormat.

What is recorded is what the programs write, not typed series:
- the node textfile is `rocmseat preflight --textfile` on the fixture trees (gpu-07:
  x99-r9700 throughout; gpu-08: x99-r9700, then x99-r9700-degraded from minute 60, a Gen1 link
  and +6,655 BadTLP), refreshed every 300 s; gpu-08's timer stops at minute 150;
- the watcher series are the real `rocmseat watch` exporter page (rocmseat.watch.exporter)
  of a real Watcher judging vLLM pages; the pages are tests/fixtures/metrics/seq/00-healthy.txt
  (vLLM's own exposition) with its counters advanced at 20 drafts/s, K = 3; gpu-08/r1's drafter
  goes wrong at minute 90 (position-0 acceptance 0.02). The vLLM counters are recorded too
  (job "vllm"), for the panel over the recording rules.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import UTC
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "grafana" / "rocmseat-dashboard.json"
RULES = REPO / "prometheus" / "rocmseat-rules.yml"
PAGE = REPO / "tests" / "fixtures" / "metrics" / "seq" / "00-healthy.txt"
TREES = REPO / "tests" / "fixtures" / "sysfs"
SPAN_S = 3 * 3600
SCRAPE_S = 30
WATCH_S = 10
NODES = ("gpu-07", "gpu-08")
REPLICAS = ("r0", "r1")
SEAT = "qwen-tp2"
DEGRADE_AT_S = 60 * 60
DRAFTER_DIES_AT_S = 90 * 60
TIMER_STOPS_AT_S = 150 * 60


def _textfile(tree: str, work: Path) -> str:
    from rocmseat.cli.main import main

    out = work / f"tf-{tree}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["preflight", "--sysfs-root", str(TREES / tree), "--state-dir",
              str(work / f"state-{tree}"), "--textfile", str(out)])
    return (out / "rocmseat_preflight.prom").read_text()


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.endswith("_created") and math.isfinite(s.value):
                out.append((s.name, dict(s.labels), s.value))
    return out


class Engine:
    """The counters one replica's vLLM would serve, advanced per second of traffic."""

    def __init__(self) -> None:
        self.drafts = 10000.0
        self.pos = [8000.0, 6400.0, 5120.0]
        self.gen = 40000.0
        self.template = PAGE.read_text()

    def advance(self, seconds: float, dead: bool) -> None:
        drafts = 20.0 * seconds
        accept = (0.02, 0.0, 0.0) if dead else (0.8, 0.64, 0.512)
        self.drafts += drafts
        for i, a in enumerate(accept):
            self.pos[i] += round(drafts * a)
        self.gen += drafts * (1 + sum(accept))

    def page(self) -> str:
        values = {
            "vllm:spec_decode_num_drafts_total": self.drafts,
            "vllm:spec_decode_num_draft_tokens_total": 3 * self.drafts,
            "vllm:spec_decode_num_accepted_tokens_total": sum(self.pos),
            "vllm:generation_tokens_total": self.gen,
        }
        text = self.template
        for name, value in values.items():
            text = re.sub(rf"^({re.escape(name)}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", text,
                          flags=re.M)
        for i, value in enumerate(self.pos):
            text = re.sub(
                rf'^(vllm:spec_decode_num_accepted_tokens_per_pos_total\{{[^}}]*position="{i}"\}})'
                r" \S+$", rf"\g<1> {value}", text, flags=re.M)
        return text


def record(work: Path, start_s: float) -> Path:
    """Write the OpenMetrics file of the whole span (each series in time order)."""
    from rocmseat.watch.exporter import ExportState, make_registry
    from rocmseat.watch.loop import WatchConfig, Watcher
    from rocmseat.watch.scrape import Target

    healthy, degraded = _textfile("x99-r9700", work), _textfile("x99-r9700-degraded", work)
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}

    def add(name: str, labels: dict[str, str], value: float, t: float) -> None:
        key = (name, tuple(sorted(labels.items())))
        series.setdefault(key, []).append((t, value))

    clock = [start_s]
    engines = {(n, r): Engine() for n in NODES for r in REPLICAS}
    watchers = {}
    for node in NODES:
        targets = [Target(r, f"http://{node}:{8000 + i}/metrics") for i, r in enumerate(REPLICAS)]

        def fetch(url: str, _timeout: float, node: str = node) -> str:
            replica = REPLICAS[int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]) - 8000]
            return engines[(node, replica)].page()

        watchers[node] = Watcher(targets, WatchConfig(interval_s=WATCH_S,
                                                      state_dir=work / f"watch-{node}"),
                                 fetch=fetch, clock=lambda: clock[0])
    steps = SPAN_S // WATCH_S
    for step in range(steps + 1):
        t_rel = step * WATCH_S
        clock[0] = start_s + t_rel
        for (node, replica), engine in engines.items():
            engine.advance(WATCH_S, dead=(node, replica) == ("gpu-08", "r1")
                           and t_rel >= DRAFTER_DIES_AT_S)
        for node, watcher in watchers.items():
            statuses = watcher.step()
            if t_rel % SCRAPE_S:
                continue
            state = ExportState(statuses=tuple(statuses), evaluated_at_s=clock[0],
                                started_at_s=start_s, max_age_s=watcher.config.max_age_s,
                                evaluations=step + 1, last_duration_s=0.05)
            from prometheus_client import generate_latest

            page = generate_latest(make_registry(lambda s=state: s, lambda: clock[0])).decode()
            base = {"job": "rocmseat-watch", "instance": f"{node}:9464", "node": node,
                    "seat": SEAT}
            for name, labels, value in _samples(page):
                add(name, {**labels, **base}, value, clock[0])
            for i, replica in enumerate(REPLICAS):
                vbase = {"job": "vllm", "instance": f"{node}:{8000 + i}", "node": node}
                for name, labels, value in _samples(engines[(node, replica)].page()):
                    if name.startswith("vllm:"):
                        add(name, {**labels, **vbase}, value, clock[0])
            nbase = {"job": "node", "instance": f"{node}:9100", "node": node}
            bad = node == "gpu-08" and t_rel >= DEGRADE_AT_S
            for name, labels, value in _samples(degraded if bad else healthy):
                add(name, {**labels, **nbase}, value, clock[0])
            written = min(t_rel, TIMER_STOPS_AT_S) if node == "gpu-08" else t_rel
            add("node_textfile_mtime_seconds",
                {**nbase, "file": "/var/lib/prometheus/node-exporter/rocmseat_preflight.prom"},
                start_s + written // 300 * 300, clock[0])
    for watcher in watchers.values():
        watcher.close()
    path = work / "recorded.om"
    _write_openmetrics(series, path)
    return path


def _write_openmetrics(
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]], path: Path
) -> None:
    """OpenMetrics with timestamps: a family's series together, each in time order (what
    `promtool tsdb create-blocks-from openmetrics` reads)."""
    with path.open("w") as f:
        for key in sorted(series):
            labels = ",".join(f'{k}="{v}"' for k, v in key[1])
            for t, v in series[key]:
                f.write(f"{key[0]}{{{labels}}} {v!r} {t:.3f}\n")
        f.write("# EOF\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


class Prometheus:
    def __init__(self, data: Path, work: Path) -> None:
        self.port = _free_port()
        config = work / "prometheus.yml"
        config.write_text("global: {scrape_interval: 30s}\n")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=30d"],
            stdout=subprocess.DEVNULL, stderr=(work / "prometheus.log").open("w"))
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2)
                return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus did not get ready; see {work / 'prometheus.log'}")

    def query_range(self, expr: str, start: float, end: float, step: int) -> list[dict]:  # type: ignore[type-arg]
        q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
        doc = _get(f"{self.url}/api/v1/query_range?{q}")
        if doc.get("status") != "success":
            raise RuntimeError(f"{expr}: {doc}")
        return doc["data"]["result"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _expand(expr: str, variables: list[str]) -> str:
    for name in variables:
        expr = expr.replace(f"${name}", ".*")
    return expr


def _legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def plot(prom: Prometheus, start: float, end: float, out: Path) -> list[tuple[str, int]]:
    import matplotlib

    matplotlib.use("Agg")
    from datetime import datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    dash = json.loads(DASHBOARD.read_text())
    variables = [v["name"] for v in dash["templating"]["list"]]
    panels = dash["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit = 0.42
    fig = plt.figure(figsize=(24 * unit * 1.6, rows * unit))
    fig.suptitle(f"{dash['title']} (panels' PromQL over a recorded Prometheus; not Grafana)",
                 fontsize=11, y=0.995)
    counts = []
    for p in panels:
        g = p["gridPos"]
        rect = (g["x"] / 24 + 0.035, 1 - (g["y"] + g["h"]) / rows + 0.012,
                g["w"] / 24 - 0.05, g["h"] / rows - 0.03)
        if p["type"] == "row":
            fig.text(0.01, 1 - (g["y"] + 0.6) / rows, p["title"], fontsize=10, weight="bold")
            continue
        ax = fig.add_axes(rect)
        ax.set_title(p["title"], fontsize=8, loc="left")
        n = 0
        for t in p.get("targets", []):
            for s in prom.query_range(_expand(t["expr"], variables), start, end, 60):
                xs = [datetime.fromtimestamp(float(x), UTC) for x, _ in s["values"]]
                ys = [float(y) for _, y in s["values"]]
                ax.plot(xs, ys, lw=0.9, label=_legend(t.get("legendFormat", ""), s["metric"]),
                        drawstyle="steps-post" if p["type"] == "state-timeline" else "default")
                n += 1
        counts.append((p["title"], n))
        ax.set_xlim(datetime.fromtimestamp(start, UTC),
                    datetime.fromtimestamp(end, UTC))
        ax.tick_params(labelsize=6)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
        if n:
            ax.legend(fontsize=5, loc="upper left", ncol=2 if n > 6 else 1, framealpha=0.6)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    return counts


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "docs" / "img" / "rocmseat-dashboard.png"
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian package prometheus)", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        end = float(int(time.time()) // 60 * 60)
        start = end - SPAN_S
        recorded = record(work, start)
        data = work / "data"
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(recorded),
                        str(data)], check=True, capture_output=True)
        prom = Prometheus(data, work)
        try:
            rules_out = work / "rules-blocks"
            subprocess.run(["promtool", "tsdb", "create-blocks-from", "rules",
                            f"--start={int(start)}", f"--end={int(end)}", "--eval-interval=60s",
                            f"--url={prom.url}", f"--output-dir={rules_out}", str(RULES)],
                           check=True, capture_output=True)
        finally:
            prom.stop()
        for block in rules_out.iterdir():
            if block.is_dir() and (block / "meta.json").exists():
                shutil.move(str(block), data / block.name)
        prom = Prometheus(data, work)
        try:
            counts = plot(prom, start, end, out)
        finally:
            prom.stop()
    for title, n in counts:
        print(f"{n:3d} series  {title}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
