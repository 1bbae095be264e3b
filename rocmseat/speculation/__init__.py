"""The speculation decision (docs/spec.md): should this seat speculate, with which draft length,
up to which load. The CLI stays `rocmseat spec ...`.

- `gate/`: the A/B ship gate (`rocmseat spec gate`): arms launched cold through `rocmseat
  launch`, loaded with vLLM's own `vllm bench serve`, watched by `rocmseat watch`, judged per gate
  with noise bands; the crossover and a proposed schedule.
- `advise/`: the draft-length advisor (`rocmseat spec advise`): per-position acceptance, the step
  cost fit, the staircase of K per batch-size band with the basis of every tier, and the seat
  edit that writes it.
- here: what both use: `documents` (strict models of gate.json, arm.json and watch alerts),
  `stats` (means, spreads, bootstrap helpers), `plot` (the pictures).
"""
