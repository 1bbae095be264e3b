"""The launch room: one replica of a seat started the same way every time (`flow`): its plan
(`plan`), the pair's preflight gate (`gate`), supervision in its own process group
(`supervise`), readiness and sd_notify, the startup log read while it starts (`startuplog`) and
judged (`judge`, `memplan`) into the startup report (`report`), and the systemd units
(`units`). Where a replica runs is the placement room's answer (rocmseat.placement).
docs/launch.md."""
