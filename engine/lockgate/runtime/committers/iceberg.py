"""Apache Iceberg sinks (pyiceberg, SQL catalog): one catalog commit per window, found again
by its snapshot summary.

Each window is one Iceberg transaction, committed by one atomic swap of the table's metadata
pointer in the SQL catalog; its snapshots carry ``lockgate.job``, ``lockgate.sink`` and
``lockgate.window`` in their summary. A replay of window ``W`` that finds such a snapshot in the
ancestry of the table's current snapshot writes nothing. A crash before the catalog commit
leaves only unreferenced data and metadata files; a crash after it leaves the whole window.

Without a key the rows are appended; with ``key`` the transaction deletes the rows of the
window's keys (copy-on-write) and appends the rows that are not ``op = '-D'``.

The catalog is pyiceberg's SQL catalog: by default a SQLite file under LOCKGATE_HOME
(``<home>/iceberg/catalog.db``, tables under ``<home>/iceberg/warehouse``), or any SQLAlchemy
URL (``postgresql+psycopg://...`` in service mode). A table is created from the stream's
schema (plus the window column) with ``lockgate.job`` and ``lockgate.sink`` as properties, and
an empty first snapshot marking where the sink's life begins (the state a restore to before
the first window goes back to). A table another job's sink owns is refused; one created
outside Lockgate is claimed by its first window's transaction. No Spark import.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pyarrow as pa

from lockgate.errors import SinkRefusedError

from ...filesystems import join, location_uri
from .base import check_staged, drop_staged_after
from .lakehouse import JOB_PROP, SINK_PROP, START_PROP, WINDOW_PROP, LakehouseCommitter, nullable

#: the namespace of a table named without one
DEFAULT_NAMESPACE = "default"


class IcebergCommitter(LakehouseCommitter):
    """Iceberg sink: the window's rows in one catalog commit whose snapshots name the window."""

    kind = "iceberg"
    sink_class = "IcebergSink"

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        name = sink["table"]
        self.identifier = name if "." in name else f"{DEFAULT_NAMESPACE}.{name}"
        self.catalog_name = sink.get("catalog_name") or "lockgate"
        self.catalog_url = sink.get("catalog_url")
        self.warehouse = sink.get("warehouse")

    def describe(self) -> str:
        where = self.catalog_url or "the default SQLite catalog under LOCKGATE_HOME"
        return f"Iceberg table {self.identifier!r} (catalog {_safe_url(where)})"

    # -- the catalog ---------------------------------------------------------------------
    def _catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        url, warehouse = self.catalog_url, self.warehouse
        if url is None or warehouse is None:
            if "://" in self.home and not self.home.startswith("file://"):
                raise SinkRefusedError(
                    f"{self.describe()}: LOCKGATE_HOME ({self.home}) is not a local folder, so it cannot hold the "
                    "default SQLite catalog and warehouse: give the IcebergSink a catalog_url= and a warehouse="
                )
            local = self.home.removeprefix("file://")
            os.makedirs(os.path.join(local, "iceberg"), exist_ok=True)
            url = url or f"sqlite:///{os.path.join(local, 'iceberg', 'catalog.db')}"
            warehouse = warehouse or join(location_uri(local), "iceberg", "warehouse")
        if "://" not in warehouse:
            warehouse = "file://" + location_uri(warehouse)
        return SqlCatalog(self.catalog_name, uri=url, warehouse=warehouse)

    def _load(self, catalog: Any) -> Any:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return catalog.load_table(self.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def unreachable(self, exc: BaseException) -> bool:
        """Whether the SQL catalog's database could not be reached (retrying helps)."""
        try:
            from sqlalchemy.exc import InterfaceError, OperationalError
        except ImportError:  # pragma: no cover - sqlalchemy comes with pyiceberg[sql-*]
            return False
        return isinstance(exc, (OperationalError, InterfaceError))

    @staticmethod
    def _ancestry(table: Any) -> list[Any]:
        """The current snapshot and its ancestors, newest first."""
        from pyiceberg.table.snapshots import ancestors_of

        return list(ancestors_of(table.current_snapshot(), table.metadata))

    @staticmethod
    def _props(snapshot: Any) -> dict[str, str]:
        return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}

    def _windows(self, table: Any, job: str, sink_name: str) -> list[int]:
        """The windows of this sink in the table's current state, newest first."""
        out = []
        for snap in self._ancestry(table):
            props = self._props(snap)
            if props.get(JOB_PROP) == job and props.get(SINK_PROP) == sink_name and WINDOW_PROP in props:
                w = int(props[WINDOW_PROP])
                if not out or out[-1] != w:  # a keyed window is two snapshots (delete, append)
                    out.append(w)
        return out

    # -- protocol ------------------------------------------------------------------------
    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        with self.guarded(job, sink_name, None, f"checking whether window {window} was committed"):
            table = self._load(self._catalog())
            return table is not None and window in self._windows(table, job, sink_name)

    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        from pyiceberg.exceptions import CommitFailedException

        check_staged(staged, self.kind, job, sink_name, window)
        replay = {"target": f"iceberg:{self.identifier}", "rows": staged.get("rows"), "replayed": True}
        guard = self.guarded(job, sink_name, window, f"checking whether window {window} was committed")
        with guard:
            catalog = self._catalog()
            table = self._load(catalog)
            if table is not None and window in self._windows(table, job, sink_name):
                self.discard(staged)
                return replay
            data = self.read_staged(job, sink_name, window, staged)
            if self.key is not None:
                self.check_keys(data, job, sink_name, window)
            rows = self.rows(data, window)
            guard.doing = "preparing the table"
            table, claim = self._prepare(catalog, table, rows.schema, job, sink_name, window)
            rows = rows.select(table.schema().as_arrow().names)
            guard.doing = f"committing window {window}"
            self.before_table_commit()
            try:
                self._write(table, rows, data, claim, job, sink_name, window)
            except CommitFailedException:
                table = self._load(catalog)  # a concurrent replay of the window committed first?
                if table is not None and window in self._windows(table, job, sink_name):
                    self.discard(staged)
                    return replay
                raise
            self.after_table_commit(window)
        self.discard(staged)
        return {**replay, "rows": rows.num_rows, "replayed": False}

    def _prepare(self, catalog: Any, table: Any, schema: pa.Schema, job: str, sink_name: str,
                 window: int) -> tuple[Any, bool]:
        """The table (created from ``schema`` when missing) and whether this commit claims it
        (an existing table that names no owner); refused when another job owns it or its
        columns are not the stream's."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        if table is None:
            catalog.create_namespace_if_not_exists(self.identifier.rsplit(".", 1)[0])
            try:
                table = catalog.create_table(self.identifier, nullable(schema), properties=self.owner(job, sink_name))
            except TableAlreadyExistsError:
                table = catalog.load_table(self.identifier)
        claim = self.refuse_other_owner(dict(table.properties), job, sink_name, window)
        self.check_fits(table.schema().as_arrow(), schema, job, sink_name, window)
        if not claim and table.current_snapshot() is None:
            # the first snapshot, where the sink's life begins (a restore to before its first
            # window goes back to it); made here, not with the table, so a kill in between is mended
            table.append(table.schema().as_arrow().empty_table(),
                         snapshot_properties={**self.owner(job, sink_name), START_PROP: "created"})
        return table, claim

    def _write(self, table: Any, rows: pa.Table, data: pa.Table, claim: bool, job: str, sink_name: str,
               window: int) -> None:
        """One transaction: the claim, the keyed deletes, the append (always made: an empty
        one still writes the snapshot that records the window)."""
        import pyarrow.compute as pc
        from pyiceberg.table.upsert_util import create_match_filter

        summary = self.summary(job, sink_name, window)
        with table.transaction() as tx:
            if claim:
                tx.set_properties(self.owner(job, sink_name))
                tx.append(rows.schema.empty_table(),
                          snapshot_properties={**self.owner(job, sink_name), START_PROP: "claimed"})
            if self.key is not None and rows.num_rows:
                with warnings.catch_warnings():  # "Delete operation did not match any records": new keys
                    warnings.simplefilter("ignore")
                    tx.delete(create_match_filter(rows.select(self.key), self.key), snapshot_properties=summary)
                rows = rows.filter(pc.invert(self.deletes(data)))
            tx.append(rows, snapshot_properties=summary)

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        """Roll the table back to its state after ``window``: the snapshot that committed it
        (or the sink's first, empty snapshot) becomes the current one again, in one catalog
        commit.

        A rollback, not a delete of the rows whose window column is later: a keyed sink's
        later windows replaced and deleted rows that only the older snapshot still has. And it
        keeps replays right: the later windows' snapshots leave the current ancestry, so their
        replays find them not committed and write them again, on top of the restored snapshot.
        It needs the snapshots it goes back to: expiring them makes it fail with one line."""
        with self.guarded(job, sink_name, None, f"rolling back the windows after window {window}"):
            later = self._rollback(job, sink_name, window)
        drop_staged_after(self._staging_root(job, sink_name), window)
        return later

    def _rollback(self, job: str, sink_name: str, window: int) -> list[int]:
        table = self._load(self._catalog())
        if table is None or table.current_snapshot() is None:
            return []
        later: set[int] = set()
        target = None
        for snap in self._ancestry(table):  # newest first
            props = self._props(snap)
            if props.get(JOB_PROP) != job or props.get(SINK_PROP) != sink_name:
                continue
            if WINDOW_PROP in props and int(props[WINDOW_PROP]) > window:
                later.add(int(props[WINDOW_PROP]))
                continue
            if WINDOW_PROP in props or START_PROP in props:
                target = snap
                break
        if not later:
            return []
        if target is None:
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}': {self.describe()} no longer has the snapshot that holds window "
                f"{window} (expired); nothing was changed. Restore to a later window, or restore with --reset-state "
                "and rebuild the table"
            )
        table.manage_snapshots().set_current_snapshot(snapshot_id=target.snapshot_id).commit()
        return sorted(later)

    def committed_windows(self, job: str, sink_name: str) -> list[int]:
        """The windows of this sink in the table's current state, ascending."""
        table = self._load(self._catalog())
        return [] if table is None else sorted(self._windows(table, job, sink_name))


def _safe_url(url: str) -> str:
    """A catalog URL without its password."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}@{host}"

