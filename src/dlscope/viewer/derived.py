"""Tables computed in Python (roofline report, run comparison) served like stored tables.

Their rows go into a private in-memory SQLite database (shared cache, one per result), so the viewer's table
machinery — SQL sort, column search, paging, CSV/JSON/Excel export — serves them exactly as it serves the
profile's own tables. Results are cached per key (database, generation, aggregations) because computing them
takes up to a second and a page asks for the same one several times (view, then each of its tables).
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dlscope.viewer.params import parse_table_request
from dlscope.viewer.profile_db import ProfileDB
from dlscope.viewer.query import fetch_page
from dlscope.viewer.tables import TableSpec


class DerivedDB(ProfileDB):
    """Rows of derived tables in a read-only in-memory database that quacks like a ProfileDB."""

    def __init__(self, name: str, tables: list[tuple[TableSpec, list[dict]]]):
        self.key = name
        self.profile_name = name
        self.meta: dict = {}
        self.notice = None
        self.schema_version = None
        self._local = threading.local()
        self._generation = 1
        self.counts: dict = {}
        self._uri = f"file:dlscope-derived-{uuid.uuid4().hex}?mode=memory&cache=shared"
        self.path = Path(self._uri)  # only a unique key for count caches
        self._holder = sqlite3.connect(self._uri, uri=True, check_same_thread=False)  # keeps the memory alive
        for spec, rows in tables:
            names = [c.sql for c in spec.columns]
            self._holder.execute(f"CREATE TABLE {spec.source} ({', '.join(names)})")
            self._holder.executemany(f"INSERT INTO {spec.source} VALUES ({', '.join('?' * len(names))})",
                                     [tuple(_cell(r.get(n)) for n in names) for r in rows])
        self._holder.commit()
        self.tables = {spec.source for spec, _ in tables}

    def load(self) -> None:  # nothing on disk to re-read
        pass

    def open_readonly(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only = 1")
        return conn

    def close(self) -> None:
        self._holder.close()


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (list, dict)):
        return str(value)
    return value


def derived_page(db: DerivedDB, spec: TableSpec, params: Mapping[str, str], prefix: str = "") -> dict:
    """One page of a derived table, parsed and validated like any table request."""
    return fetch_page(db, parse_table_request(spec, params, prefix))


class DerivedCache:
    """A small LRU of computed results; a key being computed is computed once (other callers wait)."""

    def __init__(self, size: int = 8):
        self.size = size
        self.data: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        self.building: dict = {}

    def get(self, key, build: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.data:
                self.data.move_to_end(key)
                return self.data[key]
            key_lock = self.building.setdefault(key, threading.Lock())
        with key_lock:
            with self.lock:
                if key in self.data:
                    return self.data[key]
            value = build()
            with self.lock:
                self.data[key] = value
                self.building.pop(key, None)
                while len(self.data) > self.size:
                    self.data.popitem(last=False)
            return value

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
