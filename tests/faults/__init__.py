"""The fault suite: each row of docs/reliability.md injected for real and its outcome checked."""
