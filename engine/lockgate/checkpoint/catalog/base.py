"""The catalog's foundation: its URL, engine and transactions.

Every catalog method runs in one :meth:`CatalogBase._write` or :meth:`CatalogBase._read`
transaction; both turn a read-only or locked database into a clear
:class:`~lockgate.errors.CatalogUnavailableError` (see :mod:`.unavailable`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...errors import CatalogError
from .connection import make_engine, normalize_url, sqlite_file
from .schema import create_schema
from .unavailable import folder_error, unavailable_error


class CatalogBase:
    """A connection to the catalog database; the per-concept mixins add the API."""

    def __init__(self, url: str | Path):
        self._url = sa.make_url(normalize_url(url))
        backend = self._url.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise CatalogError(
                f"unsupported catalog URL '{self.url}': use a SQLite file "
                "(sqlite:////abs/path/catalog.db) or PostgreSQL (postgresql+psycopg://user@host/db)"
            )
        try:
            self._engine = make_engine(self._url)
        except OSError as exc:
            path = sqlite_file(self._url)
            error = folder_error(exc, path.parent) if path is not None else None
            if error is None:
                raise
            raise error from exc
        with self._write() as conn:
            create_schema(conn, self.url)

    @property
    def url(self) -> str:
        """The catalog URL, with any password hidden."""
        return self._url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests and tools; the methods are the API)."""
        return self._engine

    def close(self) -> None:
        """Release the catalog's database connections."""
        self._engine.dispose()

    @contextmanager
    def _unavailable_as_error(self) -> Iterator[None]:
        try:
            yield
        except sa.exc.DBAPIError as exc:
            error = unavailable_error(exc, self._url)
            if error is None:
                raise
            raise error from exc

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction (SQLite: holding the write lock from its start)."""
        with self._unavailable_as_error(), self._engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read-only transaction (SQLite: a WAL snapshot, no write lock)."""
        with self._unavailable_as_error(), self._engine.connect() as conn:
            conn.execution_options(lockgate_read_only=True)
            with conn.begin():
                yield conn
