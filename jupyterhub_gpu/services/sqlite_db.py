"""The services' SQLite files (notification preferences and outbox, the usage store): one way to open them.

WAL, so readers in other threads or processes never wait for the writer; autocommit (`isolation_level=None`),
so every transaction is an explicit BEGIN ... COMMIT and nothing stays open by accident; usable from the worker
threads the services hand their writes to (each caller serialises its own writes)."""
from __future__ import annotations

import os
import sqlite3


def open_wal(path: str | os.PathLike, schema: str, synchronous: str | None = None) -> sqlite3.Connection:
    """A writer's connection with `schema` (CREATE ... IF NOT EXISTS statements) applied."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    if synchronous is not None:
        db.execute(f"PRAGMA synchronous={synchronous}")  # a fixed word from the caller, never input
    db.executescript(schema)
    return db
