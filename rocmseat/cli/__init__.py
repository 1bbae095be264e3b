"""The CLI room: click commands only: options -> one library call -> render -> exit code. No
policy lives here (docs/architecture.md, "The house")."""
