"""The run's journal: notes kept outside workflow history and retrieved by relevance.

One SQLite database per run with an FTS5 index; search ranks notes by BM25. The agent
writes facts, decisions and open questions through the `note` tool; the loop writes a
summary of every verified step. Each step's brief then carries the notes most relevant to
it, however long ago they were written.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

from activities.errors import fatal
from longrun.contracts import RUN_FOLDER_PATTERN, Note
from longrun.settings import Settings

_RUN_ID = re.compile(RUN_FOLDER_PATTERN)
_WORD = re.compile(r"[^\W_]{3,}", re.UNICODE)


class Journal:
    """Notes of every run under one directory, a database per run."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def of(cls, settings: Settings) -> Journal:
        """The journals of a worker's data directory."""
        return cls(settings.data_dir.resolve() / "memory")

    def _connect(self, run_id: str) -> sqlite3.Connection:
        if not _RUN_ID.match(run_id):
            raise fatal(f"run id '{run_id}' cannot name a journal")
        self.root.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.root / f"{run_id}.sqlite")
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS notes "
            "USING fts5(kind UNINDEXED, step UNINDEXED, text)"
        )
        return db

    def add(self, run_id: str, kind: str, step: str, text: str) -> None:
        """Keep one note; the same note again (a retried activity) is kept once."""
        with closing(self._connect(run_id)) as db, db:
            db.execute(
                "DELETE FROM notes WHERE kind = ? AND step = ? AND text = ?", (kind, step, text)
            )
            db.execute("INSERT INTO notes VALUES (?, ?, ?)", (kind, step, text))

    def search(self, run_id: str, query: str, k: int) -> list[Note]:
        """The `k` notes most relevant to `query` (BM25), best first."""
        words = sorted({w.lower() for w in _WORD.findall(query)})
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        with closing(self._connect(run_id)) as db:
            rows = db.execute(
                "SELECT kind, step, text FROM notes WHERE notes MATCH ? ORDER BY bm25(notes) "
                "LIMIT ?",
                (match, k),
            ).fetchall()
        return [Note(kind=kind, step=step, text=text) for kind, step, text in rows]
