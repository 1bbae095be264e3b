"""The placement room: the one answer to "which replicas of a seat exist on this node, on which
GPUs, ports, caches and state dirs" (docs/launch.md, "Placement").

`rocmseat.placement.place.place` is the entry point; `rules` holds what the seat file alone
says (names, ports, dirs, the `--pair` parser), `resolve` the pure resolver over the node's
inventory, `record` the frozen record and its `placement.json`, `recorded` the records launch
saved.
"""
