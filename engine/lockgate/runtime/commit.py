"""Phase two of the sink protocol: commit staged output, exactly once per window.

The worker stages each sink's output of window ``W`` (:mod:`lockgate.runtime.sinks`,
which needs Spark); the controller, which has no SparkSession, commits it here. Every
commit is idempotent per ``(job, sink, window)`` and may be replayed any number of
times after a crash (kill -9 at any instant, mid-commit included): the window's rows
end up in the target exactly once.

- **file** sinks: the staged folder ``<path>/_staging/<job>/w=<W>-a<A>/`` is renamed to
  ``<path>/lg_window=<W>/`` (one atomic rename on a local or HDFS file system); the
  target folder's existence is the commit record.
- **collect** sinks: the same, from ``<home>/staging/<job>/<sink>/w=<W>-a<A>/`` to
  ``<home>/collect/<job>/<name>/lg_window=<W>/``; :func:`read_collected` reads them.
- **postgres** sinks: one transaction inserts the commit marker
  ``lockgate_sink_commits(job, sink, window)`` (``ON CONFLICT DO NOTHING``: a marker
  already there means the window was committed) and bulk-inserts the staged rows with
  the window id in the sink's window column; a crash before ``COMMIT`` leaves nothing.

A deliberate restore to an earlier window retracts later windows
(:meth:`SinkCommitter.retract_after`); staged output of an attempt that never got
recorded is thrown away with :meth:`SinkCommitter.discard`.

No Spark import in this module.
"""

from __future__ import annotations

import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from lockgate.errors import SinkCommitError, SinkNotFoundError

from . import postgres as pg

WINDOW_DIR = "lg_window"
RETRACTED_DIR = "_retracted"
MARKER_TABLE = "lockgate_sink_commits"

_WINDOW_RE = re.compile(r"^lg_window=(-?\d+)$")
_STAGED_RE = re.compile(r"^w=(-?\d+)-a(\d+)$")


# -- file systems --------------------------------------------------------------------
def resolve(location: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """``(file system, path)`` for a local path or a file system URI.

    Local paths become absolute; ``s3a://`` and ``s3n://`` (Hadoop spellings) read as
    ``s3://``.
    """
    location = os.fspath(location)
    if "://" in location:
        scheme, rest = location.split("://", 1)
        scheme = scheme.lower()
        if scheme == "file":
            return pafs.LocalFileSystem(), os.path.abspath("/" + rest.lstrip("/"))
        if scheme in ("s3a", "s3n"):
            location = "s3://" + rest
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path.rstrip("/")
    if location.startswith("file:"):
        return pafs.LocalFileSystem(), os.path.abspath(location[len("file:") :])
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))


def location_uri(location: str | os.PathLike[str]) -> str:
    """``location`` in the form stage descriptors carry: absolute path, or the URI."""
    location = os.fspath(location)
    if "://" in location:
        return location.rstrip("/")
    if location.startswith("file:"):
        return os.path.abspath(location[len("file:") :])
    return os.path.abspath(os.path.expanduser(location))


def join(base: str, *parts: str) -> str:
    """``base`` and ``parts`` joined with ``/`` (works for paths and URIs)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def _kind(fs: pafs.FileSystem, path: str) -> pafs.FileType:
    return fs.get_file_info(path).type


def _exists_dir(fs: pafs.FileSystem, path: str) -> bool:
    return _kind(fs, path) == pafs.FileType.Directory


def delete_path(fs: pafs.FileSystem, path: str) -> bool:
    """Delete a folder or file; ``False`` when it was not there."""
    kind = _kind(fs, path)
    if kind == pafs.FileType.NotFound:
        return False
    try:
        if kind == pafs.FileType.Directory:
            fs.delete_dir(path)
        else:
            fs.delete_file(path)
    except FileNotFoundError:
        return False
    return True


def _list_dirs(fs: pafs.FileSystem, path: str) -> list[str]:
    if not _exists_dir(fs, path):
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [i.base_name for i in infos if i.type == pafs.FileType.Directory]


def staging_dir_name(window: int, attempt: int) -> str:
    """``w=<W:010d>-a<A>``: one staged attempt of one window."""
    return f"w={window:010d}-a{attempt}"


# -- descriptors ---------------------------------------------------------------------
def _check_staged(staged: dict[str, Any], kind: str, job: str, sink_name: str, window: int) -> None:
    if not isinstance(staged, dict) or "uri" not in staged:
        raise SinkCommitError(
            f"job '{job}', sink '{sink_name}', window {window}: not a staged descriptor: {staged!r}"
        )
    if staged.get("kind") not in (None, kind):
        raise SinkCommitError(
            f"job '{job}', sink '{sink_name}', window {window}: staged output is of a "
            f"{staged.get('kind')!r} sink, the sink is {kind!r}"
        )
    for key, want in (("job", job), ("sink", sink_name), ("window", window)):
        if key in staged and staged[key] != want:
            raise SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: staged output belongs to "
                f"{key} {staged[key]!r}, not {want!r}; refusing to commit it"
            )


def _gone(job: str, sink_name: str, window: int, staged: dict[str, Any], target: str) -> SinkCommitError:
    return SinkCommitError(
        f"job '{job}', sink '{sink_name}', window {window}: cannot commit: the staged output "
        f"({staged.get('uri')}) is gone and the window was never committed to {target}. "
        f"The window must be re-run (restore from the checkpoint before window {window})."
    )


# -- committers ----------------------------------------------------------------------
class SinkCommitter(ABC):
    """Commits staged output of one sink; idempotent per ``(job, sink, window)``."""

    kind = ""

    @abstractmethod
    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        """Make window ``window``'s staged output visible in the target, exactly once.

        Returns ``{"target", "rows", "replayed"}``; ``replayed`` is true when the window
        was committed before (nothing is written again).
        """

    @abstractmethod
    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        """True when window ``window`` is in the target."""

    @abstractmethod
    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        """Remove committed output of windows ``> window``; return their ids, ascending."""

    @abstractmethod
    def _staging_root(self, job: str, sink_name: str) -> str:
        """Folder holding every staged attempt of this job and sink."""

    def discard(self, staged: dict[str, Any]) -> None:
        """Delete staged output (an attempt that will never be committed); missing is fine."""
        if not staged or not staged.get("uri"):
            return
        fs, path = resolve(staged["uri"])
        delete_path(fs, path)

    def discard_all_staged(self, job: str, sink_name: str) -> None:
        """Delete every staged attempt of ``job`` for this sink (after recovery replayed
        the commits still owed, none of them is needed)."""
        fs, path = resolve(self._staging_root(job, sink_name))
        delete_path(fs, path)


class _FolderCommitter(SinkCommitter):
    """Commit = rename ``staged`` to ``<root>/lg_window=<W>``; the folder is the record."""

    def _root(self, job: str, sink_name: str) -> str:
        raise NotImplementedError

    def _staging_root(self, job: str, sink_name: str) -> str:
        raise NotImplementedError

    def target(self, job: str, sink_name: str, window: int) -> str:
        return join(self._root(job, sink_name), f"{WINDOW_DIR}={window}")

    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        _check_staged(staged, self.kind, job, sink_name, window)
        root = self._root(job, sink_name)
        target = self.target(job, sink_name, window)
        fs, target_path = resolve(target)
        sfs, staged_path = resolve(staged["uri"])
        info = {"target": target, "rows": staged.get("rows"), "replayed": True}
        if _exists_dir(fs, target_path):
            if staged_path != target_path:
                delete_path(sfs, staged_path)  # a later attempt of a committed window: garbage
            return info
        if not _exists_dir(sfs, staged_path):
            if _exists_dir(fs, target_path):  # committed meanwhile by a concurrent replay
                return info
            raise _gone(job, sink_name, window, staged, target)
        _, root_path = resolve(root)
        fs.create_dir(root_path, recursive=True)
        try:
            fs.move(staged_path, target_path)
        except OSError as exc:
            if _exists_dir(fs, target_path):  # a concurrent commit won the rename
                delete_path(sfs, staged_path)
                return info
            raise SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: could not rename the staged "
                f"output {staged['uri']} to {target}: {exc}"
            ) from exc
        return {**info, "replayed": False}

    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        fs, path = resolve(self.target(job, sink_name, window))
        return _exists_dir(fs, path)

    def committed_windows(self, job: str, sink_name: str) -> list[int]:
        fs, root_path = resolve(self._root(job, sink_name))
        return sorted(int(m.group(1)) for d in _list_dirs(fs, root_path) if (m := _WINDOW_RE.match(d)))

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        fs, root_path = resolve(self._root(job, sink_name))
        later = [w for w in self.committed_windows(job, sink_name) if w > window]
        trash = join(root_path, RETRACTED_DIR)
        for w in sorted(later, reverse=True):
            fs.create_dir(trash, recursive=True)
            # one atomic rename takes the window out of the target, then delete at leisure
            fs.move(join(root_path, f"{WINDOW_DIR}={w}"), join(trash, f"{WINDOW_DIR}={w}-{uuid.uuid4().hex}"))
        delete_path(fs, trash)
        _drop_staged_after(self._staging_root(job, sink_name), window)
        return later


def _drop_staged_after(staging_root: str, window: int) -> list[str]:
    """Delete staged attempts of windows ``> window`` under ``staging_root``."""
    fs, path = resolve(staging_root)
    dropped = []
    for d in _list_dirs(fs, path):
        m = _STAGED_RE.match(d)
        if m and int(m.group(1)) > window:
            delete_path(fs, join(path, d))
            dropped.append(d)
    return dropped


class FileCommitter(_FolderCommitter):
    """File sink: ``<path>/lg_window=<W>/`` appears by one rename of the staged folder."""

    kind = "file"

    def __init__(self, sink: dict[str, Any], home: str):
        self.sink = sink
        self.home = home
        self.path = location_uri(sink["path"])

    def _root(self, job: str, sink_name: str) -> str:
        return self.path

    def _staging_root(self, job: str, sink_name: str) -> str:
        return join(self.path, "_staging", job)


class CollectCommitter(_FolderCommitter):
    """Collect sink: ``<home>/collect/<job>/<name>/lg_window=<W>/`` (Parquet)."""

    kind = "collect"

    def __init__(self, sink: dict[str, Any], home: str):
        self.sink = sink
        self.home = location_uri(home)
        self.name = sink.get("name")

    def _root(self, job: str, sink_name: str) -> str:
        return collect_root(self.home, job, self.name or sink_name)

    def _staging_root(self, job: str, sink_name: str) -> str:
        return join(self.home, "staging", job, sink_name)


def collect_root(home: str, job: str, name: str) -> str:
    """Where the committed windows of collect sink ``name`` of ``job`` live."""
    return join(location_uri(home), "collect", job, name)


def read_collected(home: str, job: str, name: str) -> pa.Table:
    """All committed windows of collect sink ``name`` of ``job``, with an ``lg_window``
    (int64) column, in window order."""
    fs, root_path = resolve(collect_root(home, job, name))
    windows = sorted(int(m.group(1)) for d in _list_dirs(fs, root_path) if (m := _WINDOW_RE.match(d)))
    if not windows:
        _, job_path = resolve(join(location_uri(home), "collect", job))
        known = sorted(
            d
            for d in _list_dirs(fs, job_path)
            if any(_WINDOW_RE.match(w) for w in _list_dirs(fs, join(job_path, d)))
        )
        listing = ", ".join(repr(k) for k in known) if known else "none"
        raise SinkNotFoundError(
            f"job '{job}': collect sink {name!r} has no committed window under {home}. "
            f"Collect sinks of job '{job}' with committed windows: {listing}."
        )
    tables = []
    for w in windows:
        t = ds.dataset(join(root_path, f"{WINDOW_DIR}={w}"), format="parquet", filesystem=fs).to_table()
        if t.num_columns == 0:
            continue
        if WINDOW_DIR in t.column_names:
            t = t.drop_columns([WINDOW_DIR])
        tables.append(t.append_column(WINDOW_DIR, pa.repeat(pa.scalar(w, pa.int64()), t.num_rows)))
    if not tables:
        return pa.table({WINDOW_DIR: pa.array([], pa.int64())})
    return pa.concat_tables(tables, promote_options="permissive")


class PostgresCommitter(SinkCommitter):
    """PostgreSQL sink: the window's rows and its commit marker in one transaction."""

    kind = "postgres"

    #: test hook, called with the connection after the rows are ingested and before
    #: ``COMMIT`` (simulates a crash at the worst moment).
    _before_commit: Callable[[Any], None] | None = None

    def __init__(self, sink: dict[str, Any], home: str):
        self.sink = sink
        self.home = location_uri(home)
        self.url = pg.normalize_url(sink["url"])
        self.table = sink["table"]
        self.window_column = sink.get("window_column") or "lg_window"

    # -- helpers -----------------------------------------------------------------
    def _staging_root(self, job: str, sink_name: str) -> str:
        return join(self.home, "staging", job, sink_name)

    def _where(self) -> str:
        return f"PostgreSQL table {self.table!r} at {pg.safe_url(self.url)}"

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
            raise SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: PostgreSQL table "
                f"{self.table!r} has no window column {self.window_column!r}; add it "
                f"(ALTER TABLE ... ADD COLUMN {self.window_column} BIGINT) or name the right one "
                f"with PostgresSink(window_column=...)"
            )
        missing = [c for c in schema.names if c not in have]
        if missing:
            raise SinkCommitError(
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
        _check_staged(staged, self.kind, job, sink_name, window)
        target = f"postgres:{self.table}"
        conn = pg.connect(self.url)
        try:
            self._ensure_marker_table(conn)
            replay = {"target": target, "rows": staged.get("rows"), "replayed": True}
            if self._marker_exists(conn, job, sink_name, window):
                conn.rollback()
                self.discard(staged)
                return replay
            conn.rollback()
            sfs, staged_path = resolve(staged["uri"])
            if not _exists_dir(sfs, staged_path):
                raise _gone(job, sink_name, window, staged, self._where())
            dataset = ds.dataset(staged_path, format=staged.get("format", "parquet"), filesystem=sfs)
            if self.window_column in dataset.schema.names:
                raise SinkCommitError(
                    f"job '{job}', sink '{sink_name}', window {window}: the sink's rows already "
                    f"have a column {self.window_column!r}; rename it or pick another "
                    f"PostgresSink(window_column=...)"
                )
            self._ensure_table(conn, dataset.schema, job, sink_name, window)

            # the one transaction: marker, rows, commit
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
            db_schema, name = pg.split_table(self.table)
            try:
                cur.adbc_ingest(
                    name, self._reader(dataset, window, counter), mode="append", db_schema_name=db_schema
                )
            except Exception as exc:
                conn.rollback()
                raise SinkCommitError(
                    f"job '{job}', sink '{sink_name}', window {window}: inserting the staged rows "
                    f"into {self._where()} failed (nothing was committed): {exc}"
                ) from exc
            if counter[0] != int(staged.get("rows") or 0):
                cur.execute(
                    f'UPDATE {MARKER_TABLE} SET rows = $4 WHERE job = $1 AND sink = $2 AND "window" = $3',
                    (job, self._marker_sink(sink_name), window, counter[0]),
                )
            if self._before_commit is not None:
                self._before_commit(conn)
            conn.commit()
        finally:
            conn.close()
        self.discard(staged)
        return {"target": target, "rows": counter[0], "replayed": False}

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
            raise SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: {self._where()} is already written by "
                f"job '{other_job}' (sink '{other_sink}'); a PostgreSQL table takes one job's sink, because its "
                "rows carry the window but not the job and a restore of one would retract the other's windows. "
                f"Write to another table, or retire the other job and delete its rows and its markers "
                f"(DELETE FROM {MARKER_TABLE} WHERE job = '{other_job}')"
            )

    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        conn = pg.connect(self.url)
        try:
            return self._marker_exists(conn, job, sink_name, window)
        finally:
            conn.close()

    def committed_at(self, job: str, sink_name: str, window: int) -> datetime | None:
        """When window ``window`` was committed (``None``: not committed)."""
        conn = pg.connect(self.url)
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
            conn.close()
        if not row or row[0] is None:
            return None
        return row[0].astimezone(UTC)

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        conn = pg.connect(self.url)
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
            conn.close()
        _drop_staged_after(self._staging_root(job, sink_name), window)
        return sorted(windows)


_COMMITTERS: dict[str, type[SinkCommitter]] = {
    "file": FileCommitter,
    "collect": CollectCommitter,
    "postgres": PostgresCommitter,
}


def committer_for(sink: dict[str, Any], home: str) -> SinkCommitter:
    """The committer of a sink given its ``to_config()`` dict; ``home`` is LOCKGATE_HOME."""
    kind = sink.get("kind") if isinstance(sink, dict) else None
    cls = _COMMITTERS.get(kind or "")
    if cls is None:
        raise SinkCommitError(f"no committer for sink kind {kind!r}; expected one of {sorted(_COMMITTERS)}")
    return cls(sink, home)  # type: ignore[call-arg]
