"""rocmseat's own OpenAI-compatible streaming client (speculation/gate/openai_bench.py): the
figures vLLM's client computes, the result file benchresult reads, and hostile servers.

The event shapes are llama-server's, as served by xllamacpp 2026.10.11549 to
`POST /v1/completions {"stream": true, "stream_options": {"include_usage": true}}` (recorded on
this machine: one `data:` line per token, then a last chunk with `usage` and `timings`, then
`data: [DONE]`). The real server is driven in tests/e2e/test_llamacpp_engine.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rocmseat.speculation.gate import battery as battery_mod
from rocmseat.speculation.gate import openai_bench as ob
from rocmseat.speculation.gate.benchresult import parse_bench_result
from rocmseat.speculation.gate.settings import Battery


def _chunk(text: str) -> str:
    return "data: " + json.dumps({"choices": [{"text": text, "index": 0, "finish_reason": None}],
                                  "object": "text_completion"}) + "\n\n"


def _last(tokens: int, draft_n: int, accepted: int) -> str:
    return "data: " + json.dumps({
        "choices": [{"text": "", "index": 0, "finish_reason": "length"}],
        "usage": {"completion_tokens": tokens, "prompt_tokens": 18, "total_tokens": 18 + tokens},
        "timings": {"predicted_n": tokens, "draft_n": draft_n, "draft_n_accepted": accepted},
    }) + "\n\ndata: [DONE]\n\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    body: list[str]
    delay_s: float
    status: int
    seen: list[dict]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.seen.append(json.loads(self.rfile.read(length)))
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in self.server.body:
            data = piece.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            time.sleep(self.server.delay_s)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.body, srv.delay_s, srv.status, srv.seen = [], 0.01, 200, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_one_completion_gives_ttft_itl_tokens_and_llamacpp_timings(server):
    server.body = [_chunk("a"), _chunk("b"), _chunk("cd"), _last(4, 6, 3)]
    out = ob.completion(_url(server), "demo", (5, 6, 7), 4, timeout_s=10)
    assert out.error == ""
    assert out.output_tokens == 4  # from usage, not the 3 chunks (one carried two tokens)
    assert out.draft_n == 6 and out.draft_n_accepted == 3
    assert out.ttft_s is not None and 0 < out.ttft_s < out.latency_s
    assert len(out.itl_s) == 2 and all(g > 0 for g in out.itl_s)
    sent = server.seen[0]
    assert sent["prompt"] == [5, 6, 7] and sent["stream"] is True and sent["ignore_eos"] is True
    assert sent["temperature"] == 0 and sent["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("body", "status", "said"), [
    (["data: {not json\n\n"], 200, "not JSON"),
    (['data: {"error": {"message": "Loading model"}}\n\n'], 200, "Loading model"),
    ([_chunk("a"), _last(99, 0, 0)], 200, "more than the 4 tokens"),
    ([_chunk("a"), _last(-1, 0, 0)], 200, "not a count"),
    (["data: [DONE]\n\n"], 200, "no event carried text"),
    ([_chunk("a")], 503, "HTTP 503"),
    (["data: " + "x" * (ob.MAX_EVENT_BYTES + 10)], 200, "longer than"),
    ([_chunk("a")] * 100, 200, "more than 80 events"),
])
def test_a_hostile_stream_is_a_failed_request_never_a_crash(server, body, status, said):
    server.body, server.status, server.delay_s = body, status, 0.0
    out = ob.completion(_url(server), "demo", "hello", 4, timeout_s=10)
    assert out.output_tokens == 0
    assert said in out.error


def test_a_dripping_server_fails_at_the_deadline(server):
    server.body, server.delay_s = [_chunk("a")] * 3, 1.0
    started = time.monotonic()
    out = ob.completion(_url(server), "demo", "hello", 4, timeout_s=0.5)
    assert time.monotonic() - started < 2.0
    assert "timed out" in out.error


def test_the_battery_runs_as_vllm_bench_serve_results(server, tmp_path: Path):
    """Every phase of the battery -> a result file parse_bench_result reads, with the prompts
    each phase asks for (token ids of the asked length, or the shipped prompt file's text)."""
    server.body, server.delay_s = [_chunk("a"), _chunk("b"), _last(8, 9, 9)], 0.0
    runs = battery_mod.plan(Battery(output_tokens=8, concurrency=(1, 2), repeats=1, prompts=4,
                                    long_prompt_tokens=20), 1024)
    client = ob.OpenAIBench()
    for run in runs:
        reply = client.run_spec(run, base_url=_url(server), model="demo", result_dir=tmp_path,
                                timeout_s=30, abort=lambda: None,
                                metadata={"rocmseat_arm": "base", "rocmseat_phase": run.phase})
        assert reply == {"ok": True}
        result = parse_bench_result((tmp_path / f"{run.name}.json").read_text(), run.name)
        assert result.completed == run.num_prompts and result.failed == 0
        assert result.total_output_tokens == 8 * run.num_prompts
        assert result.mean_ttft_ms is not None and result.mean_tpot_ms is not None
        assert result.ttfts_s is not None and len(result.ttfts_s) == run.num_prompts
        assert result.metadata["rocmseat_arm"] == "base"
    prompts = [s["prompt"] for s in server.seen]
    assert [len(p) for p in prompts[:1]] == [20]  # cold TTFT: 20 token ids
    assert all(3 <= t < 259 for t in prompts[0])
    assert any(isinstance(p, str) for p in prompts)  # the decode runs: the prompt file's text


def test_tpot_and_throughput_as_vllm_computes_them():
    outs = [ob.Outcome(0.1, 1.1, 11, 5, (0.1,) * 10, None, None),
            ob.Outcome(0.3, 2.3, 21, 5, (0.1,) * 20, None, None),
            ob.Outcome(None, 0.0, 0, 0, (), None, None, "HTTP 500")]
    run = battery_mod.RunSpec("decode", 2, 0, (), 3, 21)
    doc = ob.result_doc(run, ob.Workload(("a",) * 3, 21, 2, 0), outs, 4.0, model="m",
                        metadata={})
    assert doc["completed"] == 2 and doc["failed"] == 1
    assert doc["output_throughput"] == pytest.approx(32 / 4.0)
    assert doc["mean_tpot_ms"] == pytest.approx(100.0)  # (1.1-0.1)/10 and (2.3-0.3)/20
    assert doc["mean_ttft_ms"] == pytest.approx(200.0)
    assert ob.percentile([1, 2, 3, 4], 50) == 2.5  # numpy's linear default


def test_an_aborted_run_sends_no_more_and_writes_no_result(server, tmp_path: Path):
    server.body = [_chunk("a"), _last(1, 0, 0)]
    run = battery_mod.RunSpec("decode", 1, 0, ("--dataset-name", "random", "--random-input-len",
                                               "4", "--max-concurrency", "1"), 5, 1)
    reply = ob.OpenAIBench().run_spec(run, base_url=_url(server), model="m",
                                      result_dir=tmp_path, timeout_s=10,
                                      abort=lambda: "the watchdog saw a hang", metadata={})
    assert reply["ok"] is False and "hang" in reply["error"]
    assert server.seen == []
    assert not (tmp_path / f"{run.name}.json").exists()


def test_the_gate_drives_a_non_vllm_seat_with_its_own_client():
    """vllm bench serve for a vLLM seat only: a llama.cpp seat's Python is never asked for it."""
    from rocmseat.seat.load import load_seat
    from rocmseat.speculation.gate.arms import engine_pythons, uses_vllm_bench
    from tests.conftest import REPO

    llama = load_seat(REPO / "launchers" / "demo-cpu-llamacpp.toml")
    vllm = load_seat(REPO / "launchers" / "demo-cpu-spec.toml")
    assert not uses_vllm_bench(llama) and uses_vllm_bench(vllm)
    assert engine_pythons(llama, vllm) == [vllm.engine.python]
    assert engine_pythons(llama) == []
