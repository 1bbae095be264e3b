"""The seat room: the seat file (launchers/*.toml) and nothing else: its schema (`model`), the
rules across its keys (`rules`), its loading with located errors (`load`, over rocmseat.tomlio)
and the locator of keys in its text (`locate`). docs/seat.md."""
