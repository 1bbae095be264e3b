"""Pure judgement of one pair's probe: PairProbe -> findings hip.runtime/ipc/p2p/bandwidth.

Why these verdicts: docs/architecture.md incident 2 (cross-socket IPC fails with 17 and the TP group
host-stages every all-reduce) and incident 1 (the x8 slot: 20.5 against 27.2 GB/s host bandwidth).
"""

from __future__ import annotations

from typing import Any

from rocmseat.findings import Finding, Severity, Subject
from rocmseat.hip.probe import Direction, PairProbe, StageFailure

# Host links whose slower figure is below this fraction of the faster one are asymmetric
# (the X99 bench's x8 slot: 20.5 / 27.2 = 0.75; run-to-run noise on one link is a few percent).
ASYMMETRY_RATIO = 0.9


def short(pci: str) -> str:
    return pci[5:] if len(pci) == 12 and pci[4] == ":" else pci


def hip_version(encoded: int | None) -> str:
    """hipRuntimeGetVersion's integer: major * 10,000,000 + minor * 100,000 + patch."""
    if encoded is None:
        return "unknown version"
    major, rest = divmod(encoded, 10_000_000)
    minor, patch = divmod(rest, 100_000)
    return f"{major}.{minor}.{patch}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _failure_data(failure: StageFailure) -> dict[str, Any]:
    return {
        "stage": failure.stage,
        "role": failure.role,
        "call": failure.call,
        "error_name": failure.error_name,
        "error_code": failure.error_code,
        "hung": failure.hung,
        "reason": failure.reason,
    }


def judge_pair(probe: PairProbe) -> list[Finding]:
    subject = f"{probe.a}+{probe.b}"
    # One rounding for data and message, so the two always agree.
    base: dict[str, Any] = {"wall_s": round(probe.wall_s, 2), "a": probe.a, "b": probe.b}
    runtime = _runtime(probe, subject, base)
    if runtime.severity is not Severity.OK:
        return [runtime]
    return [runtime, _ipc(probe, subject, base), _p2p(probe, subject, base),
            _bandwidth(probe, subject, base)]


def _runtime(probe: PairProbe, subject: str, base: dict[str, Any]) -> Finding:
    hint = "install the ROCm HIP runtime or set ROCM_PATH / ROCMSEAT_HIP_LIBRARY"
    if probe.no_runtime is not None:
        return Subject(subject).unknown("hip.runtime", probe.no_runtime, hint, base)
    if probe.runtime_failure is not None:
        f = probe.runtime_failure
        source = f" ({probe.library})" if probe.library else ""
        message = f"HIP could not be used{source}: {f.call or f.stage}: {f.reason}"
        if f.hung:
            message = f"HIP stage {f.stage} hung: {f.reason}"
        return Subject(subject).unknown(
            "hip.runtime", message,
            "check the amdgpu driver, /dev/kfd access and HIP_VISIBLE_DEVICES",
            {**base, **_failure_data(f)},
        )
    if probe.not_visible is not None:
        return Subject(subject).unknown(
            "hip.runtime", f"HIP does not see {probe.not_visible}",
            "check HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES in the replica env",
            {**base, "devices": list(probe.devices)},
        )
    return Subject(subject).ok(
        "hip.runtime",
        f"HIP runtime {hip_version(probe.runtime_version)} from {probe.library}, "
        f"{len(probe.devices)} devices",
        "",
        {**base, "library": probe.library,
         "runtime_version": probe.runtime_version,
         "devices": list(probe.devices)},
    )


def _ipc(probe: PairProbe, subject: str, base: dict[str, Any]) -> Finding:
    wall = f"probe {base['wall_s']:.2f} s"
    failed = [d for d in probe.directions if d.failure is not None]
    if not failed and len(probe.directions) == 2:
        nbytes = probe.directions[0].verified_bytes or 0
        return Subject(subject).ok(
            "hip.ipc", f"IPC verified both ways ({nbytes >> 20} MiB each, every byte); {wall}", "",
            {**base, "verified_bytes": nbytes},
        )
    if not failed:
        return Subject(subject).unknown("hip.ipc", f"IPC not probed; {wall}", "", base)
    first = failed[0]
    assert first.failure is not None
    f = first.failure
    what = f"stage {f.stage} hung" if f.hung else f"failed at stage {f.stage}"
    message = (f"{short(first.owner)} -> {short(first.opener)}: {what}: {f.reason}"
               f"{' in ' + f.call if f.call and not f.hung else ''}; {wall}")
    if len(failed) == 2:
        message += " (both directions failed)"
    elif len(probe.directions) == 1:
        message += " (reverse direction not run)"
    hint = ("no cross-process IPC: RCCL and vLLM's custom all-reduce host-stage every transfer; "
            "keep the TP group on one socket" if f.error_code == 17 else
            "HIP IPC between these GPUs does not work for the replica")
    return Subject(subject).fail("hip.ipc", message, hint, {
        **base, **_failure_data(f), "direction": f"{first.owner}->{first.opener}",
        "failed_directions": [f"{d.owner}->{d.opener}" for d in failed]})


def _p2p(probe: PairProbe, subject: str, base: dict[str, Any]) -> Finding:
    ab, ba = probe.peer.get("a_to_b"), probe.peer.get("b_to_a")
    data = {**base, "a_to_b": ab, "b_to_a": ba, "enable_peer": dict(probe.enable_peer)}
    figures = f"{short(probe.a)}->{short(probe.b)} = {int(bool(ab))}, " \
              f"{short(probe.b)}->{short(probe.a)} = {int(bool(ba))}"
    if not (ab and ba):
        return Subject(subject).warn(
            "hip.p2p", f"hipDeviceCanAccessPeer {figures}: RCCL routes through the host",
            "check that the pair shares a PCIe root complex / socket, IOMMU settings", data,
        )
    refused = {k: v for k, v in probe.enable_peer.items() if v}
    if refused:
        return Subject(subject).warn(
            "hip.p2p",
            f"peer access reported but hipDeviceEnablePeerAccess failed: "
            f"{', '.join(f'{k}: {v}' for k, v in refused.items())}",
            "RCCL routes through the host", data,
        )
    return Subject(subject).ok("hip.p2p", f"hipDeviceCanAccessPeer {figures}", "", data)


def _host_figures(directions: tuple[Direction, ...]) -> dict[str, tuple[float | None, ...]]:
    return {d.owner: (d.owner_h2d_gbps, d.owner_d2h_gbps) for d in directions}


def _bandwidth(probe: PairProbe, subject: str, base: dict[str, Any]) -> Finding:
    host = _host_figures(probe.directions)
    d2d = {f"{d.owner}->{d.opener}": d.d2d_gbps for d in probe.directions}
    data = {**base,
            "h2d_gbps": {pci: v[0] for pci, v in host.items()},
            "d2h_gbps": {pci: v[1] for pci, v in host.items()},
            "d2d_gbps": d2d}
    a_fig, b_fig = host.get(probe.a, (None, None)), host.get(probe.b, (None, None))
    d2d_text = ", ".join(f"D2D {short(k.split('->')[0])}->{short(k.split('->')[1])} {_fmt(v)}"
                         for k, v in d2d.items())
    text = (f"{short(probe.a)} H2D {_fmt(a_fig[0])} D2H {_fmt(a_fig[1])}, "
            f"{short(probe.b)} H2D {_fmt(b_fig[0])} D2H {_fmt(b_fig[1])}, {d2d_text} GB/s")
    if None in d2d.values() or len(d2d) < 2:
        text += " (D2D not measured: IPC failed)"
    if None in (*a_fig, *b_fig):
        return Subject(subject).unknown(
            "hip.bandwidth", f"host bandwidth not measured for both GPUs: {text}", "", data,
        )
    for label, i in (("H2D", 0), ("D2H", 1)):
        fa, fb = a_fig[i], b_fig[i]
        assert fa is not None and fb is not None
        if min(fa, fb) < ASYMMETRY_RATIO * max(fa, fb):
            slow, fast = (probe.a, probe.b) if fa < fb else (probe.b, probe.a)
            return Subject(subject).warn(
                "hip.bandwidth",
                f"asymmetric host links: {label} {short(slow)} {_fmt(min(fa, fb))} GB/s against "
                f"{short(fast)} {_fmt(max(fa, fb))} GB/s; {text}",
                "the pair runs at the slower link's pace (a x8 slot or a down-trained link); "
                "see the pcie findings",
                {**data, "slow": slow, "fast": fast},
            )
    return Subject(subject).ok("hip.bandwidth", text, "", data)
