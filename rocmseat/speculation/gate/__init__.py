"""The ship gate: A/B arms launched cold through `rocmseat launch`, loaded with vLLM's own
`vllm bench serve`, judged per gate with noise bands (docs/spec.md)."""
