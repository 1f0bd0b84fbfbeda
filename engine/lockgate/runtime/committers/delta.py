"""Delta Lake sinks (delta-rs): one Delta commit per window, idempotent by Delta's own
transaction identifiers.

Each window's commit carries the transaction action ``(appId, version) =
("lockgate/<job>/<sink>", W)`` (Delta's idempotent-writer mechanism, the one Structured
Streaming's Delta sink uses) and ``lockgate.job``, ``lockgate.sink``, ``lockgate.window`` in its
commitInfo. The table's transaction version for the app id is the last window in it: a replay
of window ``W`` that finds it ``>= W`` writes nothing. The commit is Delta's atomic put of the
next log entry, so a crash before it leaves nothing but unreferenced data files (``VACUUM``
removes them) and a crash after it leaves the whole window.

Without a key the rows are appended; with ``key`` one ``MERGE`` replaces the rows of the
window's keys and deletes the keys whose row says ``op = '-D'`` (a merge that changed nothing
still commits the transaction, as an empty append).

The table is created from the stream's schema (plus the window column), with
``lockgate.job`` and ``lockgate.sink`` in its configuration: a table another job's sink owns
is refused; a table created outside Lockgate is claimed by one commit of those properties. No
Spark import.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lockgate.errors import SinkRefusedError

from ...filesystems import arrow_uri, location_uri
from .base import check_staged, drop_staged_after
from .lakehouse import (
    JOB_PROP,
    RESTORED_PROP,
    SINK_PROP,
    START_PROP,
    WINDOW_PROP,
    LakehouseCommitter,
    nullable,
)


def _quote(column: str) -> str:
    """A column name in a delta-rs (DataFusion) predicate."""
    return "`" + column.replace("`", "``") + "`"


def _state_window(commit: dict[str, Any]) -> int | None:
    """The last window in the table after a commit of the sink: the window it committed, the
    window a restore went back to, ``-inf`` (as the smallest int) for the commit that created
    or claimed the table; ``None`` for any other commit."""
    if WINDOW_PROP in commit:
        return int(commit[WINDOW_PROP])
    if RESTORED_PROP in commit:
        return int(commit[RESTORED_PROP])
    if START_PROP in commit:
        return -(2**63)
    return None


class DeltaCommitter(LakehouseCommitter):
    """Delta sink: the window's rows in one commit carrying the transaction ``(app id, W)``."""

    kind = "delta"
    sink_class = "DeltaSink"

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.path = arrow_uri(location_uri(sink["path"]))  # s3a:// and s3n:// as s3://, which delta-rs reads
        self.storage_options: dict[str, str] | None = dict(sink.get("storage_options") or {}) or None

    def describe(self) -> str:
        return f"Delta table {self.path}"

    @staticmethod
    def app_id(job: str, sink_name: str) -> str:
        """The Delta transaction app id of a job's sink."""
        return f"lockgate/{job}/{sink_name}"

    def _props(self, job: str, sink_name: str, metadata: dict[str, str], version: int) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(custom_metadata=metadata,
                                app_transactions=[Transaction(self.app_id(job, sink_name), version)])

    def _open(self) -> Any:
        """The table, or ``None`` when there is none at the path."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path, storage_options=self.storage_options):
            return None
        return DeltaTable(self.path, storage_options=self.storage_options)

    def _last_window(self, table: Any, job: str, sink_name: str) -> int | None:
        """The table's transaction version for the sink's app id: its last window."""
        return table.transaction_version(self.app_id(job, sink_name))

    # -- protocol ------------------------------------------------------------------------
    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        with self.guarded(job, sink_name, None, f"checking whether window {window} was committed"):
            table = self._open()
            last = None if table is None else self._last_window(table, job, sink_name)
        return last is not None and last >= window

    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        check_staged(staged, self.kind, job, sink_name, window)
        replay = {"target": f"delta:{self.path}", "rows": staged.get("rows"), "replayed": True}
        with self.guarded(job, sink_name, window, f"checking whether window {window} was committed") as guard:
            table = self._open()
            if table is not None:
                last = self._last_window(table, job, sink_name)
                if last is not None and last >= window:
                    self.discard(staged)
                    return replay
            data = self.read_staged(job, sink_name, window, staged)
            if self.key is not None:
                self.check_keys(data, job, sink_name, window)
            rows = self.rows(data, window)
            guard.doing = "preparing the table"
            table = self._prepare(table, rows.schema, job, sink_name, window)
            rows = rows.select(pa.schema(table.schema().to_arrow()).names)
            props = self._props(job, sink_name, self.summary(job, sink_name, window), window)
            guard.doing = f"committing window {window}"
            self.before_table_commit()
            if self.key is None:
                self._append(table, rows, props)
            else:
                self._merge(table, rows, self.deletes(data), props, job, sink_name, window)
            self.after_table_commit(window)
        self.discard(staged)
        return {**replay, "rows": rows.num_rows, "replayed": False}

    def _prepare(self, table: Any, schema: pa.Schema, job: str, sink_name: str, window: int) -> Any:
        """The table, created from ``schema`` when missing, claimed when it names no owner;
        refused when another job owns it or its columns are not the stream's."""
        from deltalake import DeltaTable

        start = {**self.owner(job, sink_name), START_PROP: "created"}
        if table is None:
            table = DeltaTable.create(
                self.path, nullable(schema), mode="ignore", configuration=self.owner(job, sink_name),
                storage_options=self.storage_options, raise_if_key_not_exists=False,
                commit_properties=self._start_props(start),
            )
            table = DeltaTable(self.path, storage_options=self.storage_options)  # a concurrent creator's
        configuration = dict(table.metadata().configuration or {})
        if self.refuse_other_owner(configuration, job, sink_name, window):
            self.check_fits(pa.schema(table.schema().to_arrow()), schema, job, sink_name, window)
            table.alter.set_table_properties(self.owner(job, sink_name), raise_if_not_exists=False,
                                             commit_properties=self._start_props({**start, START_PROP: "claimed"}))
            table.update_incremental()
        self.check_fits(pa.schema(table.schema().to_arrow()), schema, job, sink_name, window)
        return table

    @staticmethod
    def _start_props(metadata: dict[str, str]) -> Any:
        from deltalake import CommitProperties

        return CommitProperties(custom_metadata=metadata)

    def _append(self, table: Any, rows: pa.Table, props: Any) -> None:
        from deltalake import write_deltalake

        write_deltalake(table, rows, mode="append", commit_properties=props)

    def _merge(self, table: Any, rows: pa.Table, deletes: pa.Array, props: Any, job: str, sink_name: str,
               window: int) -> None:
        """One MERGE: the window's keys deleted where their row says ``-D``, replaced or
        inserted otherwise. A merge that changes nothing makes no commit in delta-rs, so the
        transaction is then committed by an empty append."""
        assert self.key is not None
        flag = "__lg_delete"
        source = rows.append_column(flag, deletes)
        on = " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in self.key)
        values = {_quote(c): f"s.{_quote(c)}" for c in rows.column_names}
        if source.num_rows:
            (table.merge(source, on, source_alias="s", target_alias="t", commit_properties=props)
             .when_matched_delete(predicate=f"s.{flag}")
             .when_matched_update(updates={c: v for c, v in values.items()}, predicate=f"NOT s.{flag}")
             .when_not_matched_insert(updates=values, predicate=f"NOT s.{flag}")
             .execute())
            table.update_incremental()
        last = self._last_window(table, job, sink_name)
        if last is None or last < window:
            self._append(table, rows.schema.empty_table(), props)

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        """Roll the table back to its state after ``window``: a Delta ``RESTORE`` to the
        version that committed it, whose commit also sets the transaction version back to
        ``window`` (delta-rs reads the newest transaction action of an app id, so later
        windows count as not committed again and their replays write them).

        A restore, not a delete of the rows whose window column is later: a keyed sink's
        later windows replaced and deleted rows that only an earlier version still has, and
        an appending sink's rows come back the same way. It needs the versions it restores
        to: a ``VACUUM`` with a shorter retention, or log clean-up, makes it fail with one
        line (restore to a later window, or ``--reset-state`` and rebuild the table)."""
        with self.guarded(job, sink_name, None, f"rolling back the windows after window {window}"):
            later = self._restore(job, sink_name, window)
        drop_staged_after(self._staging_root(job, sink_name), window)
        return later

    def _restore(self, job: str, sink_name: str, window: int) -> list[int]:
        table = self._open()
        if table is None:
            return []
        last = self._last_window(table, job, sink_name)
        if last is None or last <= window:
            return []
        later: set[int] = set()
        target = None
        for commit in table.history():  # newest first
            if commit.get(JOB_PROP) != job or commit.get(SINK_PROP) != sink_name:
                continue  # not a commit of this sink (OPTIMIZE, an owner's claim by another job, ...)
            state = _state_window(commit)
            if state is None:
                continue
            if state > window:
                if WINDOW_PROP in commit:
                    later.add(state)
                continue
            target = int(commit["version"])
            break
        if target is None:
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}': {self.describe()} no longer has the version that holds window "
                f"{window} (its log was cleaned up); nothing was changed. Restore to a later window, or restore "
                "with --reset-state and rebuild the table"
            )
        meta = {JOB_PROP: job, SINK_PROP: sink_name, RESTORED_PROP: str(window)}
        table.restore(target, commit_properties=self._props(job, sink_name, meta, window))
        return sorted(w for w in later if w <= last)  # not those an earlier restore took out

    def committed_windows(self, job: str, sink_name: str) -> list[int]:
        """The windows in the table's current version, read from its window column."""
        table = self._open()
        if table is None:
            return []
        column = table.to_pyarrow_table(columns=[self.window_column])[self.window_column]
        return sorted(w for w in pc.unique(column).to_pylist() if w is not None)
