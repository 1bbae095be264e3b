"""The seat room: the seat file (launchers/*.toml): its schema (`model`), the rules across its
keys (`rules`), its loading with located errors (`load`, over rocmseat.tomlio), and the tables
the file is checked by that other rooms read too: the environment classes (`envclass`: key or
neutral, the variables the cache store owns) and a replica's name and port (`naming`).
docs/seat.md."""
