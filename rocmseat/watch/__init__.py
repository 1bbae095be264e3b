"""The watchdog: scrape vLLM's /metrics -> window stats -> detector -> alerts, exporter, sinks."""
