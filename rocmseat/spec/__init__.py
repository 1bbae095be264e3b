"""The speculation decision (docs/spec.md): an A/B ship gate over vLLM's own benchmark client
(`rocmseat spec gate`) and a draft-length advisor (`rocmseat spec advise`).

Pure parts: benchresult (result JSON -> values), iterlog (per-iteration log lines), acceptance
(per-position counters -> E(k), the acceptance estimate and its goodness of fit), stepcost (step
time against batch size and draft length), decide (the staircase and the proposed schedule),
schedule (vLLM's schedule rules), gates (verdicts, noise, crossover), gateconf (the `[gate]`
table), seatedit (seat files written and edited). Side effects: arms (launch, watch and the
benchmark client as subprocesses), gaterun (the battery), records (the --out directory).
"""
