"""click commands only: parse -> call the library -> render. No logic lives here."""
