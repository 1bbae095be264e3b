"""Thin adapters from rocmseat's verdicts to the fleet's own engines: Slurm (HealthCheckProgram,
NHC), node-problem-detector and Kubernetes (docs/fleet.md)."""
