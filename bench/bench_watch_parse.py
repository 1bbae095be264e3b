"""CPU time to scrape-parse-evaluate one realistic full vLLM /metrics page, against a full
prometheus_client parse of the same page.

    python3 bench/bench_watch_parse.py [--repeat 200]

Pages: tests/fixtures/metrics/*.txt, rendered by vLLM's own PrometheusStatLogger (every histogram
with its real buckets, `_created` samples, python_/process_ collectors). Measured with
time.process_time over `--repeat` runs, best of 5 batches:
- rocmseat: read_page (the targeted reader) + window_between + SpecDetector.observe;
- baseline: list(prometheus_client.parser.text_string_to_metric_families(page)), the full parse
  alone (no extraction, no evaluation);
- for context: read_page_reference (full parse + the same extraction) and one HTTP GET of the
  page from a local server with the loop's scraper (rocmseat.httpclient.AsyncScraper, one
  kept-alive connection; the same cost for both ways).
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from rocmseat.httpclient import AsyncScraper
from rocmseat.watch.detector import SpecDetector
from rocmseat.watch.metrics import read_page, read_page_reference
from rocmseat.watch.window import Snapshot, window_between

PAGES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics"


def cpu_per_call(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeat):
            fn()
        best = min(best, (time.process_time() - start) / repeat)
    return best


def serve(text: str) -> tuple[ThreadingHTTPServer, str]:
    data = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/metrics"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"{'page':<28} {'bytes':>7} {'lines':>6} {'rocmseat ms':>12} {'full parse ms':>14} "
          f"{'ratio':>7} {'ref+eval ms':>12} {'HTTP GET ms':>12}")
    for path in sorted(PAGES.glob("vllm-*.txt")):
        if "openmetrics" in path.name:
            continue
        text = path.read_text()
        previous = read_page(text)
        earlier = dataclasses.replace(
            previous,
            drafts=(previous.drafts or 0) - 500 if previous.spec_present else None,
        )
        old = Snapshot(0.0, earlier if previous.spec_present else previous)
        detector = SpecDetector(pinned_al=3.3)

        def ours(text: str = text, old: Snapshot = old, det: SpecDetector = detector) -> None:
            window = window_between(old, Snapshot(10.0, read_page(text)))
            if window is not None:
                det.observe(window, 10.0)

        def reference(text: str = text, old: Snapshot = old,
                      det: SpecDetector = detector) -> None:
            window = window_between(old, Snapshot(10.0, read_page_reference(text)))
            if window is not None:
                det.observe(window, 10.0)

        def full(text: str = text) -> None:
            for _ in text_string_to_metric_families(text):
                pass

        httpd, url = serve(text)
        scraper = AsyncScraper()
        try:
            get = cpu_per_call(lambda url=url, s=scraper: s.fetch_many([url], 5.0),
                               max(10, args.repeat // 10))
        finally:
            scraper.close()
            httpd.shutdown()
            httpd.server_close()
        a = cpu_per_call(ours, args.repeat)
        b = cpu_per_call(full, max(10, args.repeat // 10))
        c = cpu_per_call(reference, max(10, args.repeat // 10))
        print(f"{path.name:<28} {len(text):>7} {text.count(chr(10)):>6} {a * 1e3:>12.3f} "
              f"{b * 1e3:>14.3f} {b / a:>6.1f}x {c * 1e3:>12.3f} {get * 1e3:>12.3f}")
    print("ratio = full prometheus_client parse / rocmseat parse+window+evaluate (CPU time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
