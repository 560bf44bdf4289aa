"""Workspace snapshots: the user's files as content-addressed facts in the log's store.

`take` walks a workspace (its ignore rules in `ignore`) and stores what changed; `tree` is the
stored format and how two snapshots differ; `diff` their line counts and unified diff; `restore`
writes a snapshot into a directory; `refs` finds the snapshots a log names. See docs/workspace.md.
"""
