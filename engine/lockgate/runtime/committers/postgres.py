"""PostgreSQL sinks: a window's rows and its commit marker in one transaction.

One transaction inserts the commit marker ``lockgate_sink_commits(job, sink, window)``
(``ON CONFLICT DO NOTHING``: a marker already there means the window was committed) and
bulk-inserts the staged rows with the window id in the sink's window column; a crash
before ``COMMIT`` leaves nothing. The PostgreSQL I/O itself is
:mod:`lockgate.runtime.postgres`. No Spark import.

A database that is down, or goes down at any instant of a commit, fails the commit with one
:class:`~lockgate.errors.SinkUnavailableError` naming ``host:port`` (code ``UNAVAILABLE``:
a controller retries it); the window is then not checkpointed, and the next run commits it
exactly once. A database that refuses the window (credentials, permissions, rows that do
not fit) raises :class:`~lockgate.errors.SinkRefusedError`, which retrying cannot fix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from lockgate.errors import LockgateError, SinkCommitError, SinkRefusedError, SinkUnavailableError

from ...filesystems import is_dir, resolve
from .. import postgres as pg
from .base import SinkCommitter, check_staged, drop_staged_after, staged_gone

#: one row per committed ``(job, sink, window)``; the sink id is ``<sink>@<table>``
MARKER_TABLE = "lockgate_sink_commits"


class PostgresCommitter(SinkCommitter):
    """PostgreSQL sink: the window's rows and its commit marker in one transaction."""

    kind = "postgres"

    #: test hook, called with the connection after the rows are ingested and before
    #: ``COMMIT`` (simulates a crash at the worst moment).
    _before_commit: Callable[[Any], None] | None = None

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.url = pg.normalize_url(sink["url"])
        self.table = sink["table"]
        self.window_column = sink.get("window_column") or "lg_window"

    # -- helpers -----------------------------------------------------------------
    def _where(self) -> str:
        return f"PostgreSQL table {self.table!r} at {pg.safe_url(self.url)}"

    def _failed(self, exc: BaseException, job: str, sink_name: str, window: int | None, doing: str) -> LockgateError:
        """One clear error for a driver error raised while ``doing`` (``window``: the window
        being committed, ``None`` for other work)."""
        kind = pg.failure_kind(exc)
        reason = pg.failure_reason(exc)
        where = f"PostgreSQL at {pg.endpoint(self.url)} (table {self.table!r})"
        head = f"job '{job}', sink '{sink_name}'" + ("" if window is None else f", window {window}")
        if window is None:
            after = "nothing was changed; "
            then = "run the job again"
        else:
            after = "nothing of the window was committed and it is not checkpointed; "
            then = f"run the job again: window {window} is committed then, exactly once"
        if kind == "unavailable":
            return SinkUnavailableError(
                f"{head}: {where} is unavailable ({reason}, while {doing}). The database is down or "
                f"unreachable: {after}start it (or check the URL and the network), then {then} "
                "(a controller retries by itself)"
            )
        if kind == "refused":
            return SinkRefusedError(
                f"{head}: {where} refused it ({reason}, while {doing}). Fix the sink's URL, credentials, "
                f"permissions or table; retrying cannot help until then ({after}once fixed, {then})"
            )
        return SinkCommitError(f"{head}: {where} failed ({reason}, while {doing}); {after}{then}")

    @contextlib.contextmanager
    def _guard(self, job: str, sink_name: str, window: int | None, step: list[str]) -> Iterator[None]:
        """Turn a driver error (or the database going away) into one clear Lockgate error;
        ``step[0]`` says what was being done when it failed."""
        try:
            yield
        except LockgateError:
            raise
        except Exception as exc:
            if pg.failure_kind(exc) is None:
                raise
            raise self._failed(exc, job, sink_name, window, step[0]) from exc

    def _connect(self) -> Any:
        return pg.connect(self.url)

    @staticmethod
    def _close(conn: Any) -> None:
        # closing rolls back an open transaction; a connection the server dropped is
        # closed all the same, and must not hide the error that ends the commit
        with contextlib.suppress(Exception):
            conn.close()

    def _marker_sink(self, sink_name: str) -> str:
        """The marker's sink id: the sink and its target table, so two jobs of the same name
        (another home or catalog) writing other tables never share a marker."""
        return f"{sink_name}@{self.table}"

    def _ensure_marker_table(self, conn: Any) -> None:
        cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
        if pg.table_exists(cur, MARKER_TABLE):
            conn.rollback()
            return
        try:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (job TEXT NOT NULL, sink TEXT NOT NULL, "
                '"window" BIGINT NOT NULL, rows BIGINT, committed_at TIMESTAMPTZ NOT NULL DEFAULT now(), '
                'PRIMARY KEY (job, sink, "window"))'
            )
            conn.commit()
        except Exception:
            conn.rollback()  # a concurrent creator won; fine if the table is there now
            if not pg.table_exists(cur, MARKER_TABLE):
                raise
            conn.rollback()

    def _marker_exists(self, conn: Any, job: str, sink_name: str, window: int) -> bool:
        cur = conn.cursor()
        if not pg.table_exists(cur, MARKER_TABLE):
            return False
        cur.execute(
            f'SELECT count(*) FROM {MARKER_TABLE} WHERE job = $1 AND sink = $2 AND "window" = $3',
            (job, self._marker_sink(sink_name), window),
        )
        return cur.fetchone()[0] > 0

    def _ensure_table(self, conn: Any, schema: pa.Schema, job: str, sink_name: str, window: int) -> None:
        cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
        db_schema, name = pg.split_table(self.table)
        if not pg.table_exists(cur, self.table):
            empty = schema.empty_table().append_column(
                pa.field(self.window_column, pa.int64(), nullable=False), pa.array([], pa.int64())
            )
            try:
                cur.adbc_ingest(name, empty, mode="create_append", db_schema_name=db_schema)
                conn.commit()
            except Exception:
                conn.rollback()
                if not pg.table_exists(cur, self.table):
                    raise
        cur = conn.cursor()
        cur.execute(f"SELECT * FROM {pg.quote_table(self.table)} LIMIT 0")
        have = set(cur.fetch_arrow_table().schema.names)
        conn.rollback()
        if self.window_column not in have:
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}', window {window}: PostgreSQL table "
                f"{self.table!r} has no window column {self.window_column!r}; add it "
                f"(ALTER TABLE ... ADD COLUMN {self.window_column} BIGINT) or name the right one "
                f"with PostgresSink(window_column=...)"
            )
        missing = [c for c in schema.names if c not in have]
        if missing:
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}', window {window}: PostgreSQL table "
                f"{self.table!r} lacks the sink's columns {missing}"
            )

    def _reader(self, dataset: ds.Dataset, window: int, counter: list[int]) -> pa.RecordBatchReader:
        schema = dataset.schema.append(pa.field(self.window_column, pa.int64(), nullable=False))
        win = pa.scalar(window, pa.int64())

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in dataset.to_batches():
                counter[0] += batch.num_rows
                yield pa.RecordBatch.from_arrays(
                    [*batch.columns, pa.repeat(win, batch.num_rows)], schema=schema
                )

        return pa.RecordBatchReader.from_batches(schema, batches())

    # -- protocol ----------------------------------------------------------------
    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        check_staged(staged, self.kind, job, sink_name, window)
        step = [f"committing window {window}"]
        with self._guard(job, sink_name, window, step):
            return self._commit(job, sink_name, window, staged, step)

    def _commit(
        self, job: str, sink_name: str, window: int, staged: dict[str, Any], step: list[str]
    ) -> dict[str, Any]:
        target = f"postgres:{self.table}"
        step[0] = "connecting"
        conn = self._connect()
        try:
            step[0] = f"checking whether window {window} was committed"
            self._ensure_marker_table(conn)
            replay = {"target": target, "rows": staged.get("rows"), "replayed": True}
            if self._marker_exists(conn, job, sink_name, window):
                conn.rollback()
                self.discard(staged)
                return replay
            conn.rollback()
            sfs, staged_path = resolve(staged["uri"])
            if not is_dir(sfs, staged_path):
                raise staged_gone(job, sink_name, window, staged, self._where())
            dataset = ds.dataset(staged_path, format=staged.get("format", "parquet"), filesystem=sfs)
            if self.window_column in dataset.schema.names:
                raise SinkRefusedError(
                    f"job '{job}', sink '{sink_name}', window {window}: the sink's rows already "
                    f"have a column {self.window_column!r}; rename it or pick another "
                    f"PostgresSink(window_column=...)"
                )
            step[0] = "preparing the table"
            self._ensure_table(conn, dataset.schema, job, sink_name, window)

            # the one transaction: marker, rows, commit
            step[0] = "writing the commit marker"
            cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
            self._check_sole_writer(cur, job, sink_name, window)
            cur.execute(
                f'INSERT INTO {MARKER_TABLE} (job, sink, "window", rows, committed_at) '
                'VALUES ($1, $2, $3, $4, now()) ON CONFLICT (job, sink, "window") DO NOTHING '
                'RETURNING "window"',
                (job, self._marker_sink(sink_name), window, int(staged.get("rows") or 0)),
            )
            if not cur.fetchall():  # a concurrent replay committed it first
                conn.rollback()
                self.discard(staged)
                return replay
            counter = [0]
            step[0] = "inserting the staged rows"
            self._write_rows(conn, cur, dataset, window, counter, job, sink_name)
            if counter[0] != int(staged.get("rows") or 0):
                cur.execute(
                    f'UPDATE {MARKER_TABLE} SET rows = $4 WHERE job = $1 AND sink = $2 AND "window" = $3',
                    (job, self._marker_sink(sink_name), window, counter[0]),
                )
            if self._before_commit is not None:
                self._before_commit(conn)
            step[0] = "committing the transaction"
            conn.commit()
        finally:
            self._close(conn)
        self.discard(staged)
        return {"target": target, "rows": counter[0], "replayed": False}

    def _write_rows(
        self, conn: Any, cur: Any, dataset: ds.Dataset, window: int, counter: list[int], job: str, sink_name: str
    ) -> None:
        """Write the window's staged rows inside the commit's transaction (appended here)."""
        db_schema, name = pg.split_table(self.table)
        cur.adbc_ingest(name, self._reader(dataset, window, counter), mode="append", db_schema_name=db_schema)

    def _check_sole_writer(self, cur: Any, job: str, sink_name: str, window: int) -> None:
        """Refuse a table another job's (or sink's) commits already write: the rows carry the
        window but not the job, so a restore of one job would retract the other's windows."""
        suffix = f"@{self.table}"
        cur.execute(
            f"SELECT job, sink FROM {MARKER_TABLE} WHERE right(sink, char_length($3)) = $3 "
            "AND (job <> $1 OR sink <> $2) LIMIT 1",
            (job, self._marker_sink(sink_name), suffix),
        )
        other = cur.fetchall()
        if other:
            other_job, other_sink = other[0][0], other[0][1][: -len(suffix)]
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}', window {window}: {self._where()} is already written by "
                f"job '{other_job}' (sink '{other_sink}'); a PostgreSQL table takes one job's sink, because its "
                "rows carry the window but not the job and a restore of one would retract the other's windows. "
                f"Write to another table, or retire the other job and delete its rows and its markers "
                f"(DELETE FROM {MARKER_TABLE} WHERE job = '{other_job}')"
            )

    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        with self._guard(job, sink_name, None, [f"checking whether window {window} was committed"]):
            conn = self._connect()
            try:
                return self._marker_exists(conn, job, sink_name, window)
            finally:
                self._close(conn)

    def committed_at(self, job: str, sink_name: str, window: int) -> datetime | None:
        """When window ``window`` was committed (``None``: not committed)."""
        with self._guard(job, sink_name, None, [f"reading when window {window} was committed"]):
            conn = self._connect()
            try:
                cur = conn.cursor()
                if not pg.table_exists(cur, MARKER_TABLE):
                    return None
                cur.execute(
                    f'SELECT committed_at FROM {MARKER_TABLE} WHERE job = $1 AND sink = $2 AND "window" = $3',
                    (job, self._marker_sink(sink_name), window),
                )
                row = cur.fetchone()
            finally:
                self._close(conn)
        if not row or row[0] is None:
            return None
        return row[0].astimezone(UTC)

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        with self._guard(job, sink_name, None, [f"removing any rows of windows after window {window}, the last checkpoint"]):
            windows = self._retract(job, sink_name, window)
        drop_staged_after(self._staging_root(job, sink_name), window)
        return sorted(windows)

    def _retract(self, job: str, sink_name: str, window: int) -> set[int]:
        conn = self._connect()
        windows: set[int] = set()
        try:
            cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
            if pg.table_exists(cur, self.table):
                wc = pg.quote_ident(self.window_column)
                cur.execute(
                    f"WITH d AS (DELETE FROM {pg.quote_table(self.table)} WHERE {wc} > $1 RETURNING {wc}) "
                    "SELECT DISTINCT * FROM d",
                    (window,),
                )
                windows.update(int(r[0]) for r in cur.fetchall())
            if pg.table_exists(cur, MARKER_TABLE):
                cur.execute(
                    f'DELETE FROM {MARKER_TABLE} WHERE job = $1 AND sink = $2 AND "window" > $3 '
                    'RETURNING "window"',
                    (job, self._marker_sink(sink_name), window),
                )
                windows.update(int(r[0]) for r in cur.fetchall())
            conn.commit()
        finally:
            self._close(conn)
        return windows
