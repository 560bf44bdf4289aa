"""The CLI as a whole: its command table and what each command loads."""
