"""One file per schema revision, oldest first; each says what it adds and why."""
