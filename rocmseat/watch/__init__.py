"""The watchdog: scrape vLLM's /metrics -> window stats -> detector -> alerts, exporter, sinks,
readiness; remediation (`remediate/`: the ladder and its bounds) acts on the detector's verdicts."""
