"""The acceptance baseline of one replica and config key: pinned, or learned after a launch.

A baseline is the per-position acceptance profile P_i = c_i / N (the share of drafts whose first
i+1 tokens were accepted) at the full draft length K. From it the detector gets the expected
accepted tokens per draft at any effective K (a per-batch-size schedule cuts K under load:
comparing like with like, docs/architecture.md "Speculation facts"). A pinned acceptance length
(the seat's [watch].expected_acceptance_length or --baseline-al) is turned into a profile with
the constant-acceptance model AL = 1 + sum_{i=1..K} alpha^i.

Persisted atomically as `<state dir>/watch/<replica key>.json` (`rocmseat.watch-baseline/v1`,
the document BASELINE, read back through rocmseat.statedir.StateDir: docs/architecture.md,
"State"): a strict model, so a damaged or forged file is one located line and a re-learn, never
an alarm judged against nonsense.

The model's bounds: a draft is at most 64 tokens (the seat's num_speculative_tokens), so at most
64 positions, each a share 0..1, and an acceptance length 1..65; counts fit a float exactly
(2**53); `learned_at_s` is wall-clock seconds (time.time) inside 2000..2200.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from rocmseat.atomic import WriteRefused
from rocmseat.docmodel import EpochSeconds, Line, StrictDoc, strict
from rocmseat.errors import ConfigError, ReadError
from rocmseat.statedir import WATCH_DIR, WATCH_FILE, Document, StateDir

_MAX_NAME = 200  # of 255 bytes a file name may have, with ".json" and room to spare
UNKEYED = "unkeyed"
SCHEMA = "rocmseat.watch-baseline/v1"
MAX_POSITIONS = 64
MAX_COUNT = float(2**53)

Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class BaselineDoc(StrictDoc):
    schema_: Literal["rocmseat.watch-baseline/v1"] = Field(alias="schema")
    key: Annotated[Line, Field(min_length=1, max_length=4096)]
    source: Literal["pinned", "learned"]
    acceptance_length: Annotated[float, Field(ge=1.0, le=MAX_POSITIONS + 1.0,
                                              allow_inf_nan=False)]
    position_rates: Annotated[list[Share], Field(min_length=1, max_length=MAX_POSITIONS)]
    drafts: Annotated[float, Field(ge=0.0, le=MAX_COUNT, allow_inf_nan=False)]
    windows: Annotated[int, Field(ge=0, le=1 << 53)]
    learned_at_s: EpochSeconds | None = None


BASELINE = Document(WATCH_FILE, SCHEMA, strict(BaselineDoc))


@dataclass(frozen=True, slots=True)
class Baseline:
    key: str
    source: str  # "pinned" | "learned"
    acceptance_length: float
    position_rates: tuple[float, ...]
    drafts: float
    windows: int
    learned_at_s: float | None = None

    @property
    def num_positions(self) -> int:
        return len(self.position_rates)

    def accepted_per_draft(self, effective_k: float | None) -> float:
        """Expected accepted tokens per draft when drafts carry `effective_k` tokens on average.

        A window mixing two draft lengths (a schedule) is interpolated between floor and ceil.
        """
        rates = self.position_rates
        k = float(len(rates)) if effective_k is None else min(effective_k, float(len(rates)))
        whole = int(k)
        value = sum(rates[:whole])
        if whole < len(rates):
            value += (k - whole) * rates[whole]
        return value

    def accepted_per_draft_floor(self, effective_k: float | None) -> float:
        """The least expected accepted tokens per draft over every mix of draft lengths 1..K
        whose mean is `effective_k`: the reference of the drop test.

        mu(K) = sum_{i<K} P_i is concave in K (P_i falls with i), so by Jensen a mix of draft
        lengths yields at most the interpolation `accepted_per_draft` gives and at least the
        chord from (1, P_0) to (K_max, mu(K_max)) (a K=1/K=K_max schedule). Judging against the
        chord, a window whose K comes from a per-batch-size schedule can never look like a drop
        (docs/architecture.md "Speculation facts"); at full K both are mu(K_max).
        """
        rates = self.position_rates
        full = float(len(rates))
        k = full if effective_k is None else min(effective_k, full)
        top = sum(rates)
        if k <= 1.0:  # full <= 1 lands here too (k <= full)
            return max(k, 0.0) * rates[0]
        return rates[0] + (k - 1.0) / (full - 1.0) * (top - rates[0])

    def acceptance_length_at(self, effective_k: float | None) -> float:
        return 1.0 + self.accepted_per_draft(effective_k)


def alpha_for_acceptance_length(acceptance_length: float, k: int) -> float:
    """Solve 1 + sum_{i=1..k} a^i = AL for a in [0, 1] (bisection; AL is increasing in a)."""
    target = min(max(acceptance_length, 1.0), 1.0 + k)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 1.0 + sum(mid**i for i in range(1, k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def pinned_baseline(acceptance_length: float, k: int, key: str) -> Baseline:
    alpha = alpha_for_acceptance_length(acceptance_length, k)
    rates = tuple(alpha ** (i + 1) for i in range(k))
    return Baseline(key, "pinned", acceptance_length, rates, drafts=0.0, windows=0)


def learned_baseline(
    *,
    drafts: float, per_pos: tuple[float, ...], accepted: float, windows: int, key: str, now_s: float
) -> Baseline:
    rates = tuple(c / drafts for c in per_pos)
    return Baseline(key, "learned", 1.0 + accepted / drafts, rates, drafts, windows, now_s)


def file_name(replica_key: str) -> str:
    """A key as the name of its `<state dir>/watch/<name>.json`, encoded injectively:
    `[A-Za-z0-9._-]` as is, every other byte (UTF-8) as `%XX`, so `a:b` and `a_b` never share a
    file and no key leaves the folder. A name longer than a file name can be keeps its start and
    a digest of the rest. The canary's baselines and the slow-spawn history use it too."""
    safe = re.sub(r"[^A-Za-z0-9._-]",
                  lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode("utf-8",
                                                                          "surrogatepass")),
                  replica_key)
    if len(safe) > _MAX_NAME:
        digest = hashlib.sha256(safe.encode()).hexdigest()[:16]
        safe = f"{safe[:_MAX_NAME - 17]}~{digest}"
    return safe


def baseline_path(state_dir: Path, replica_key: str) -> Path:
    """`<state dir>/watch/<key>.json` (for messages; reads and writes go through StateDir)."""
    return StateDir(state_dir).path(BASELINE, name=file_name(replica_key))


def check_state_dir_writable(state_dir: Path) -> None:
    """Make `<state dir>/watch` (never group- or other-writable: its baselines must read back)
    and write a probe there, or raise a ConfigError naming it."""
    state = StateDir(state_dir)
    try:
        state.write(BASELINE, {}, name=".write-probe")
        state.remove(BASELINE, name=".write-probe")
    except (OSError, WriteRefused, ReadError) as exc:
        raise ConfigError(
            f"{state.path(WATCH_DIR)}: the state dir is not writable "
            f"({getattr(exc, 'strerror', None) or exc})",
            hint="give --state-dir a writable directory",
        ) from None


def save_baseline(state_dir: Path, replica_key: str, baseline: Baseline) -> Path:
    """Write the baseline (atomic; WriteRefused, an OSError or UntrustedState when it cannot)."""
    return StateDir(state_dir).write(BASELINE, {
        "key": baseline.key,
        "source": baseline.source,
        "acceptance_length": baseline.acceptance_length,
        "position_rates": list(baseline.position_rates),
        "drafts": baseline.drafts,
        "windows": baseline.windows,
        "learned_at_s": baseline.learned_at_s,
    }, name=file_name(replica_key))


def load_baseline(state_dir: Path, replica_key: str) -> tuple[Baseline | None, str | None]:
    """The persisted baseline (None when there is none, or none usable) and, for a file that is
    not used, one line naming it and why: a damaged or untrusted file is re-learned rather than
    trusted (a wrong baseline would mean wrong alarms), and said."""
    try:
        return read_baseline(state_dir, replica_key), None
    except (ReadError, ConfigError) as exc:  # unreadable, untrusted (StrictModes), DocumentInvalid
        return None, f"{exc.message}: not used, re-learned"


def read_baseline(state_dir: Path, replica_key: str) -> Baseline | None:
    """The persisted baseline (None: no file); ReadError when it cannot be read or trusted,
    DocumentInvalid (one line naming the file and the key) when it is not a baseline."""
    # State is hostile input too: never block on a FIFO, never read a huge file, never
    # recurse without bound (docs/architecture.md, "Hostile input"). A baseline decides a
    # verdict (the acceptance-drop alarm): one anyone but root or the reader could have
    # written, or reached through a link, is refused like sshd's StrictModes and re-learned
    # (docs/architecture.md, "State"): StateDir.read.
    doc = StateDir(state_dir).read(BASELINE, name=file_name(replica_key))
    if doc is None:
        return None
    return Baseline(key=doc.key, source=doc.source, acceptance_length=doc.acceptance_length,
                    position_rates=tuple(doc.position_rates), drafts=doc.drafts,
                    windows=doc.windows, learned_at_s=doc.learned_at_s)


def read_config_key(replica_cache_dir: Path) -> str | None:
    """The config key in the replica cache's manifest (written by rocmseat.cache.store), or None."""
    from rocmseat.cache.store import read_manifest

    manifest = read_manifest(replica_cache_dir)
    return str(manifest["key"]) if manifest is not None else None
