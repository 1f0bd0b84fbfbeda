"""PostgreSQL sinks with a key: a window's rows replace the rows of their keys, exactly once.

``PostgresSink(url, table, key=[...])`` keeps the current row of each key, which is how an
updating stream (a running aggregate's output) is read as a table. The window's commit is one
transaction, like an appending sink's: the commit marker, then

1. the staged rows into a temporary table;
2. the rows they replace (or none, for a new key) into ``lockgate_sink_history`` as
   ``before`` images (JSON of the whole row), one per (job, sink, window, key);
3. ``DELETE`` of the keys whose row says ``op = '-D'``;
4. ``INSERT ... ON CONFLICT (key) DO UPDATE`` of the others, with the window in the window
   column;

and ``COMMIT``. A crash before it leaves nothing, a replay finds the marker and does nothing.
A restore to window ``W`` puts back, for every key a later window changed, its ``before``
image from the first window after ``W`` (deleting the keys that did not exist then), in one
transaction with the removal of those windows' markers and history. The history of windows
more than ``history_windows`` behind the newest is pruned as windows commit, so a restore
further back than that is refused.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from lockgate.errors import SinkRefusedError

from .. import postgres as pg
from ..changelog import DELETE, OP
from .postgres import MARKER_TABLE, PostgresCommitter

#: before images of the rows each window of an upserting sink replaced
HISTORY_TABLE = "lockgate_sink_history"


class PostgresUpsertCommitter(PostgresCommitter):
    """PostgreSQL sink with a key: upsert and delete by key, the replaced rows kept for restores."""

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.key: list[str] = list(sink["key"])
        self.history_windows = int(sink.get("history_windows") or 1000)

    # -- the table -------------------------------------------------------------------
    def _ensure_table(self, conn: Any, schema: pa.Schema, job: str, sink_name: str, window: int) -> None:
        head = f"job '{job}', sink '{sink_name}', window {window}"
        if OP in schema.names:
            schema = schema.remove(schema.get_field_index(OP))
        missing = [k for k in self.key if k not in schema.names]
        if missing:
            raise SinkRefusedError(
                f"{head}: PostgresSink(key={self.key}) names columns the stream does not have ({', '.join(missing)}); "
                f"its columns are {', '.join(schema.names)}"
            )
        cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
        created = not pg.table_exists(cur, self.table)
        conn.rollback()
        super()._ensure_table(conn, schema, job, sink_name, window)
        cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
        keys = ", ".join(pg.quote_ident(k) for k in self.key)
        if created:
            try:
                cur.execute(f"ALTER TABLE {pg.quote_table(self.table)} ADD PRIMARY KEY ({keys})")
                conn.commit()
            except Exception:
                conn.rollback()  # a concurrent creator added it first
        if not self._has_unique_key(cur):
            conn.rollback()
            raise SinkRefusedError(
                f"{head}: PostgreSQL table {self.table!r} has no primary key or unique index on ({keys}), so its "
                f"rows cannot be replaced by key: ALTER TABLE {self.table} ADD PRIMARY KEY ({keys})"
            )
        self._ensure_history_table(conn)
        conn.rollback()

    def _has_unique_key(self, cur: Any) -> bool:
        cur.execute(
            "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = $1::regclass AND i.indisunique GROUP BY i.indexrelid",
            (pg.quote_table(self.table),),
        )
        want = sorted(self.key)
        return any(list(row[0]) == want for row in cur.fetchall())

    def _ensure_history_table(self, conn: Any) -> None:
        cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
        if pg.table_exists(cur, HISTORY_TABLE):
            return
        try:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (job TEXT NOT NULL, sink TEXT NOT NULL, "
                '"window" BIGINT NOT NULL, key JSONB NOT NULL, before JSONB, '
                'PRIMARY KEY (job, sink, "window", key))'
            )
            conn.commit()
        except Exception:
            conn.rollback()
            if not pg.table_exists(cur, HISTORY_TABLE):
                raise

    # -- the window's rows -----------------------------------------------------------
    def _write_rows(
        self, conn: Any, cur: Any, dataset: ds.Dataset, window: int, counter: list[int], job: str, sink_name: str
    ) -> None:
        tmp = f"lg_upsert_{window}"
        cur.execute(f"DROP TABLE IF EXISTS pg_temp.{tmp}")
        cur.adbc_ingest(tmp, self._reader(dataset, window, counter), mode="create", temporary=True)
        columns = [c for c in dataset.schema.names if c != OP]
        table = pg.quote_table(self.table)
        on = " AND ".join(f"t.{pg.quote_ident(k)} = s.{pg.quote_ident(k)}" for k in self.key)
        key_json = ", ".join(f"'{k}', s.{pg.quote_ident(k)}" for k in self.key)
        keys = ", ".join(pg.quote_ident(k) for k in self.key)
        cur.execute(f"SELECT count(*) FROM (SELECT {keys} FROM pg_temp.{tmp} GROUP BY {keys} HAVING count(*) > 1) d")
        repeated = cur.fetchone()[0]
        if repeated:
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}', window {window}: {repeated} key(s) of PostgresSink(key={self.key}) "
                f"have more than one row in the window, and a keyed sink keeps one row per key: key the sink by "
                f"the stream's key (an updating stream has one row per key and window), or append (no key=)"
            )
        marker = self._marker_sink(sink_name)
        cur.execute(
            f'INSERT INTO {HISTORY_TABLE} (job, sink, "window", key, before) '
            f"SELECT $1, $2, $3, jsonb_build_object({key_json}), "
            f"CASE WHEN t.{pg.quote_ident(self.key[0])} IS NULL THEN NULL ELSE to_jsonb(t) END "
            f"FROM pg_temp.{tmp} s LEFT JOIN {table} t ON {on} ON CONFLICT DO NOTHING",
            (job, marker, window),
        )
        if OP in dataset.schema.names:
            cur.execute(f"DELETE FROM {table} t USING pg_temp.{tmp} s WHERE {on} AND s.{OP} = '{DELETE}'")
            kept = f"WHERE s.{OP} IS DISTINCT FROM '{DELETE}'"
        else:
            kept = ""
        names = ", ".join(pg.quote_ident(c) for c in [*columns, self.window_column])
        values = ", ".join(f"s.{pg.quote_ident(c)}" for c in [*columns, self.window_column])
        updates = ", ".join(f"{pg.quote_ident(c)} = EXCLUDED.{pg.quote_ident(c)}"
                            for c in [*columns, self.window_column] if c not in self.key)
        action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        cur.execute(f"INSERT INTO {table} ({names}) SELECT {values} FROM pg_temp.{tmp} s {kept} "
                    f"ON CONFLICT ({keys}) {action}")
        cur.execute(f'DELETE FROM {HISTORY_TABLE} WHERE job = $1 AND sink = $2 AND "window" < $3',
                    (job, marker, window - self.history_windows))
        cur.execute(f"DROP TABLE pg_temp.{tmp}")

    # -- a restore -------------------------------------------------------------------
    def _retract(self, job: str, sink_name: str, window: int) -> set[int]:
        conn = self._connect()
        marker = self._marker_sink(sink_name)
        windows: set[int] = set()
        try:
            cur = conn.cursor(adbc_stmt_kwargs=pg.NO_COPY)
            if not pg.table_exists(cur, MARKER_TABLE):
                return windows
            cur.execute(f'SELECT max("window") FROM {MARKER_TABLE} WHERE job = $1 AND sink = $2', (job, marker))
            newest = cur.fetchone()[0]
            if newest is None or newest <= window:
                conn.rollback()
                return windows
            if newest - window > self.history_windows:
                raise SinkRefusedError(
                    f"job '{job}', sink '{sink_name}': PostgreSQL table {self.table!r} keeps the rows it replaced for "
                    f"{self.history_windows} windows, and a restore to window {window} goes back {newest - window} "
                    f"from window {newest}; nothing was changed. Restore to a later window, or restore with "
                    "--reset-state and rebuild the table"
                )
            if pg.table_exists(cur, self.table) and pg.table_exists(cur, HISTORY_TABLE):
                table = pg.quote_table(self.table)
                match = " AND ".join(f"t.{pg.quote_ident(k)} = (f.key ->> '{k}')::{self._type(cur, k)}"
                                     for k in self.key)
                first = (f"SELECT DISTINCT ON (key) key, before FROM {HISTORY_TABLE} WHERE job = $1 AND sink = $2 "
                         f'AND "window" > $3 ORDER BY key, "window"')
                cur.execute(f"DELETE FROM {table} t USING ({first}) f WHERE {match}", (job, marker, window))
                cur.execute(f"INSERT INTO {table} SELECT r.* FROM ({first}) f, "
                            f"jsonb_populate_record(NULL::{table}, f.before) r WHERE f.before IS NOT NULL",
                            (job, marker, window))
                cur.execute(f'DELETE FROM {HISTORY_TABLE} WHERE job = $1 AND sink = $2 AND "window" > $3',
                            (job, marker, window))
            cur.execute(
                f'DELETE FROM {MARKER_TABLE} WHERE job = $1 AND sink = $2 AND "window" > $3 RETURNING "window"',
                (job, marker, window),
            )
            windows.update(int(r[0]) for r in cur.fetchall())
            conn.commit()
        finally:
            self._close(conn)
        return windows

    def _type(self, cur: Any, column: str) -> str:
        """The SQL type of a key column (to compare it with the history's JSON)."""
        cur.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2",
            (pg.quote_table(self.table), column),
        )
        return str(cur.fetchone()[0])
