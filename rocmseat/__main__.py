"""`python -m rocmseat ...` is `rocmseat ...`."""

from __future__ import annotations

from rocmseat.cli.main import main

main()
