"""The tests' way to judge a recorded gate again: what a finished gate saved under --out, run
through the gate's own `assemble` (no engine is started). It lives here, not in the package:
nothing but the tests needs a gate re-judged and re-written (issue 23: no test-only code in
the package)."""

from __future__ import annotations

from pathlib import Path

from rocmseat.seat.load import load_seat
from rocmseat.speculation.gate.flow import GateContext, GateOutcome, assemble, load_saved


def rejudge(out: Path) -> GateOutcome:
    out, doc, records, battery, config, options = load_saved(out)
    seats = load_seat(out / "arms" / "candidate" / "seat.toml")
    ctx = GateContext(out, Path(doc.base_seat), Path(doc.candidate_seat), battery, config,
                      options, doc.run_id)
    return assemble(ctx, records, max_num_seqs=seats.serve.max_num_seqs)
