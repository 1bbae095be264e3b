"""Node inventory: GPUs keyed by PCI address, their PCIe path to the root port, NUMA/socket."""
