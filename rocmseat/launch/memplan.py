"""The memory plan: model memory per rank against the checkpoint's bytes / TP (pure).

A drafter's experts once pushed a whole MoE model onto a paged fallback: 9.5 GB pinned instead of
180.6 GB, 484.6 ms per pass instead of 28, and nothing logged (docs/architecture.md, incident 4).
vLLM states what it loaded on each rank: `Model loading took X GiB memory and Y seconds`
(vllm/v1/worker/gpu_model_runner.py, vLLM 0.33.0; older releases `... took X GiB and Y seconds`;
the drafter's weights are included; rocmseat.launch.startuplog reads it). Weights on disk divided
by the tensor-parallel size are what a rank should hold: quantized checkpoints stay about that
size in memory, and a dequantize-at-load path is larger, never smaller. A rank holding far less
than its share did not load the model where it should have.

`judge_memory_plan` returns one Finding (`launch.memory.plan`): `warn` when the smallest rank
holds less than `warn_below` of its share, `ok` otherwise, `unknown` when the engine stated no
model memory (vLLM's CPU build prints no such line) or the checkpoint size is not known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rocmseat.findings import Finding, Severity

CHECK_ID = "launch.memory.plan"
WARN_BELOW = 0.5
GIB = 1 << 30


def checkpoint_bytes(fingerprint: dict[str, object]) -> int | None:
    """Weight bytes of a checkpoint from rocmseat.cache.fingerprint.fingerprint_model's result
    (safetensors and other weight files; the one reader of checkpoint directories)."""
    total = 0
    found = False
    safetensors = fingerprint.get("safetensors")
    if isinstance(safetensors, dict):
        for entry in safetensors.values():
            if isinstance(entry, dict) and isinstance(entry.get("size_bytes"), int):
                total += entry["size_bytes"]
                found = True
    other = fingerprint.get("other_weights")
    if isinstance(other, dict):
        for size in other.values():
            if isinstance(size, int):
                total += size
                found = True
    return total if found else None


def checkpoint_total_from_factors(factors: Mapping[str, object]) -> int | None:
    """Target + drafter weight bytes from a config key's factors (the key fingerprints both
    checkpoints already: one read of the model directories per start). None when the key could
    not read one of them or a configured drafter's weights are not known."""
    total = 0
    for name in ("model", "drafter"):
        fingerprint = factors.get(name)
        if fingerprint is None and name == "drafter":
            speculative = factors.get("speculative")
            if speculative is None:
                continue  # no drafter configured
            return None
        if not isinstance(fingerprint, dict):
            return None
        size = checkpoint_bytes(fingerprint)
        if size is None:
            if name == "drafter":
                continue  # ngram/suffix/mtp: no weights of its own
            return None
        total += size
    return total


def judge_memory_plan(rank_memory_gib: Sequence[float], checkpoint_total_bytes: int | None,
                      tp: int, *, subject: str, warn_below: float = WARN_BELOW) -> Finding:
    """Model memory per rank (every "Model loading took" figure, one per rank) against the
    checkpoint (target + drafter) bytes / TP."""
    if tp < 1:
        raise ValueError("tp must be at least 1")
    data: dict[str, object] = {
        "rank_memory_gib": list(rank_memory_gib),
        "checkpoint_bytes": checkpoint_total_bytes,
        "tp": tp,
        "warn_below": warn_below,
    }
    if not rank_memory_gib:
        return Finding(CHECK_ID, Severity.UNKNOWN, subject,
                       "the engine stated no model memory (no 'Model loading took X GiB' line)",
                       hint="vLLM's CPU build does not print it; a GPU build does on every rank",
                       data=data)
    if not checkpoint_total_bytes:
        return Finding(CHECK_ID, Severity.UNKNOWN, subject,
                       f"model memory {min(rank_memory_gib):.2f} GiB per rank, but the "
                       "checkpoint's size is not known", data=data)
    share_gib = checkpoint_total_bytes / tp / GIB
    smallest = min(rank_memory_gib)
    ratio = smallest / share_gib if share_gib > 0 else float("inf")
    data.update({"share_gib": round(share_gib, 4), "ratio": round(ratio, 4)})
    text = (f"model memory {smallest:.2f} GiB on the smallest of {len(rank_memory_gib)} rank(s), "
            f"checkpoint {checkpoint_total_bytes / GIB:.2f} GiB / TP {tp} = {share_gib:.2f} GiB "
            f"per rank ({ratio:.0%})")
    if ratio < warn_below:
        return Finding(CHECK_ID, Severity.WARN, subject, f"{text}: far below the checkpoint's "
                       "share; weights may sit in a paged or host fallback",
                       hint="compare ms per step with a known-good start; check the drafter's "
                            "placement and the quantization path in the startup log",
                       data=data)
    return Finding(CHECK_ID, Severity.OK, subject, text, data=data)
