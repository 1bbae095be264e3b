"""The HIP room: a ctypes binding to libamdhip64 (`library`, `api`), the IPC/P2P probe run in a
child process (`probe`, `child`), HIP's device numbering against PCI addresses (`numbering`,
docs/hip.md) and the judge from probe results to findings (`judge`, `check`)."""
