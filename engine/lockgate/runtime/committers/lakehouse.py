"""What the Delta and Iceberg committers share: the staged window read as Arrow, the rows
made ready for the table, the schema and key checks, and one-line errors.

Both sinks stage exactly as a PostgreSQL sink does (Parquet under
``<home>/staging/<job>/<sink>/``); the controller reads that Parquet into Arrow and commits
it with the table format's own library. No Spark import.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lockgate.errors import LockgateError, SinkCommitError, SinkRefusedError, SinkUnavailableError

from ... import faults
from ...filesystems import is_dir, resolve
from ...storage_errors import storage_problem
from ..changelog import DELETE, OP
from .base import SinkCommitter, staged_gone

#: table properties (Delta configuration, Iceberg properties) naming the job and sink that
#: own a table, and the commit metadata (Delta commitInfo, Iceberg snapshot summary) of a window
JOB_PROP, SINK_PROP, WINDOW_PROP = "lockgate.job", "lockgate.sink", "lockgate.window"
#: commit metadata of the commit a table's life under Lockgate begins with (created or claimed)
START_PROP = "lockgate.start"
#: commit metadata of a restore: the window the table was rolled back to
RESTORED_PROP = "lockgate.restored_to"
#: the crash point inside a lakehouse sink's commit: the table commit applied, the committer's
#: own work (deleting the staged output, reporting the commit) not done
CRASH_POINT = "in_sink_commit"


class LakehouseCommitter(SinkCommitter):
    """The parts of a Delta or Iceberg committer that do not depend on the format."""

    #: ``DeltaSink`` / ``IcebergSink``, for error messages
    sink_class = ""
    #: test hooks, called with the committer right before and right after the table commit
    _before_table_commit: Callable[[Any], None] | None = None
    _after_table_commit: Callable[[Any], None] | None = None

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.window_column: str = sink.get("window_column") or "lg_window"
        self.key: list[str] | None = list(sink["key"]) if sink.get("key") else None

    # -- what the subclasses name ------------------------------------------------------
    @abstractmethod
    def describe(self) -> str:
        """The table, as an error names it."""

    @staticmethod
    def owner(job: str, sink_name: str) -> dict[str, str]:
        """The table properties that name the owning job and sink."""
        return {JOB_PROP: job, SINK_PROP: sink_name}

    def summary(self, job: str, sink_name: str, window: int) -> dict[str, str]:
        """The commit metadata of window ``window``."""
        return {JOB_PROP: job, SINK_PROP: sink_name, WINDOW_PROP: str(window)}

    # -- the window's rows ---------------------------------------------------------------
    def read_staged(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> pa.Table:
        """The window's staged rows; a staged folder that is gone is :func:`staged_gone`."""
        fs, path = resolve(staged["uri"])
        if not is_dir(fs, path):
            raise staged_gone(job, sink_name, window, staged, self.describe())
        data = ds.dataset(path, format=staged.get("format", "parquet"), filesystem=fs).to_table()
        if self.window_column in data.column_names:
            raise SinkRefusedError(
                f"job '{job}', sink '{sink_name}', window {window}: the sink's rows already have a column "
                f"{self.window_column!r}; rename it or pick another {self.sink_class}(window_column=...)"
            )
        return data

    def rows(self, data: pa.Table, window: int) -> pa.Table:
        """The rows as the table holds them: ``op`` dropped, the window column appended."""
        if OP in data.column_names:
            data = data.drop_columns([OP])
        return data.append_column(pa.field(self.window_column, pa.int64()),
                                  pa.repeat(pa.scalar(window, pa.int64()), data.num_rows))

    @staticmethod
    def deletes(data: pa.Table) -> pa.Array:
        """Per staged row: true where it deletes its key (``op = '-D'``)."""
        if OP not in data.column_names:
            return pa.array([False] * data.num_rows, pa.bool_())
        return pc.fill_null(pc.equal(data[OP], DELETE), False)

    def check_keys(self, data: pa.Table, job: str, sink_name: str, window: int) -> None:
        """A keyed sink's window: the key columns present, never null, one row per key."""
        head = f"job '{job}', sink '{sink_name}', window {window}"
        assert self.key is not None
        missing = [k for k in self.key if k not in data.column_names]
        if missing:
            raise SinkRefusedError(
                f"{head}: {self.sink_class}(key={self.key}) names columns the stream does not have "
                f"({', '.join(missing)}); its columns are {', '.join(data.column_names)}"
            )
        nulls = [k for k in self.key if data[k].null_count]
        if nulls:
            raise SinkRefusedError(
                f"{head}: {data.num_rows and sum(data[k].null_count for k in nulls)} row(s) have a null key "
                f"({', '.join(nulls)}), and {self.describe()} keeps one row per key: filter them out before the "
                f"sink, or append (no key=)"
            )
        repeated = data.group_by(self.key).aggregate([([], "count_all")]).filter(pc.field("count_all") > 1)
        if repeated.num_rows:
            raise SinkRefusedError(
                f"{head}: {repeated.num_rows} key(s) of {self.sink_class}(key={self.key}) have more than one row "
                "in the window, and a keyed sink keeps one row per key: key the sink by the stream's key (an "
                "updating stream has one row per key and window), or append (no key=)"
            )

    def check_fits(self, have: pa.Schema, want: pa.Schema, job: str, sink_name: str, window: int) -> None:
        """Refuse a table whose columns are not the stream's (names and types)."""
        have_t = {f.name: _type_name(f.type) for f in have}
        want_t = {f.name: _type_name(f.type) for f in want}
        if have_t == want_t:
            return
        missing = [n for n in want_t if n not in have_t]
        extra = [n for n in have_t if n not in want_t]
        differ = [f"{n} {have_t[n]} (the stream's is {want_t[n]})" for n in want_t if n in have_t and have_t[n] != want_t[n]]
        what = "; ".join(part for part in (
            f"the table lacks {', '.join(missing)}" if missing else "",
            f"the stream does not write {', '.join(extra)}" if extra else "",
            f"the table's column {', '.join(differ)}" if differ else "",
        ) if part)
        columns = ", ".join(f"{n} {t}" for n, t in want_t.items())
        raise SinkRefusedError(
            f"job '{job}', sink '{sink_name}', window {window}: {self.describe()} does not fit the stream ({what}). "
            f"The sink writes ({columns}): write to a new table, or change the table to these columns"
        )

    def refuse_other_owner(self, props: dict[str, str], job: str, sink_name: str, window: int | None) -> bool:
        """Refuse a table another job's (or sink's) commits write; return whether the table
        is still to be claimed (it names no owner yet)."""
        other_job, other_sink = props.get(JOB_PROP), props.get(SINK_PROP)
        if other_job is None:
            return True
        if (other_job, other_sink) == (job, sink_name):
            return False
        head = f"job '{job}', sink '{sink_name}'" + ("" if window is None else f", window {window}")
        raise SinkRefusedError(
            f"{head}: {self.describe()} is already written by job '{other_job}' (sink '{other_sink}'); a table "
            "takes one job's sink, because a restore of one job would roll back the other's windows. Write to "
            f"another table, or retire the other job and remove the table's '{JOB_PROP}' and '{SINK_PROP}' "
            "properties"
        )

    # -- the commit's moments ------------------------------------------------------------
    def before_table_commit(self) -> None:
        if self._before_table_commit is not None:
            self._before_table_commit(self)

    def after_table_commit(self, window: int) -> None:
        if self._after_table_commit is not None:
            self._after_table_commit(self)
        faults.maybe_crash(CRASH_POINT, window)

    # -- errors --------------------------------------------------------------------------
    def guarded(self, job: str, sink_name: str, window: int | None, doing: str) -> Guard:
        """A block whose library errors become one line naming the sink, the window and ``doing``."""
        return Guard(self, job, sink_name, window, doing)

    def unreachable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the table's catalog could not be reached (retrying helps)."""
        return False

    def failed(self, exc: BaseException, job: str, sink_name: str, window: int | None, doing: str,
               unavailable: bool = False) -> SinkCommitError:
        """One line for a library error raised while ``doing``: a full disk (or, with
        ``unavailable``, a catalog that cannot be reached) is :class:`SinkUnavailableError`,
        a refused write :class:`SinkRefusedError`, anything else :class:`SinkCommitError`."""
        problem = storage_problem(exc)
        reason = problem[1] if problem else _first_line(exc)
        head = f"job '{job}', sink '{sink_name}'" + ("" if window is None else f", window {window}")
        if window is None:
            after, then = "nothing was changed", "run it again"
        else:
            after = "nothing of the window was committed and it is not checkpointed"
            then = f"run the job again: window {window} is committed then, exactly once"
        text = f"{head}: {self.describe()} failed while {doing} ({reason}); {after}"
        if problem is not None and problem[0] == "refused":
            return SinkRefusedError(f"{text}. Make the table's folder writable for the user running Lockgate, "
                                    f"then {then}")
        if problem is not None:
            return SinkUnavailableError(f"{text}. Free room on the table's disk, then {then}")
        if unavailable:
            return SinkUnavailableError(f"{text}. The catalog's database is down or unreachable: start it (or check "
                                        f"the catalog URL and the network), then {then} (a controller retries by itself)")
        return SinkCommitError(f"{text}; {then}")


class Guard:
    """Turns a library error inside its block into one line (:meth:`LakehouseCommitter.failed`);
    ``doing`` says what was being done, and a block may change it as it goes on. A
    :class:`~lockgate.errors.LockgateError` (already one line) passes through.

    Example::

        with committer.guarded(job, sink, window, "preparing the table") as guard:
            table = prepare()
            guard.doing = f"committing window {window}"
            commit(table)
    """

    def __init__(self, committer: LakehouseCommitter, job: str, sink_name: str, window: int | None, doing: str):
        self.committer, self.job, self.sink_name, self.window, self.doing = committer, job, sink_name, window, doing

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, LockgateError) or not isinstance(exc, Exception):
            return
        raise self.committer.failed(exc, self.job, self.sink_name, self.window, self.doing,
                                    unavailable=self.committer.unreachable(exc)) from exc


def nullable(schema: pa.Schema) -> pa.Schema:
    """The schema a new table is created with: every column nullable (optional), because a
    window's staged Parquet may say a column holds no null and the next window's may not."""
    return pa.schema([f.with_nullable(True) for f in schema])


def _type_name(t: pa.DataType) -> str:
    """A type as the check compares it: string and binary of any width alike, timestamps by
    unit and whether they are instants."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}{', UTC' if t.tz else ''}]"
    if pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"list<{_type_name(t.value_type)}>"
    if pa.types.is_list(t):
        return f"list<{_type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {_type_name(f.type)}" for f in t) + ">"
    return str(t)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()).split(" (Background on this error at:")[0] or type(exc).__name__
    return text[:300] + ("..." if len(text) > 300 else "")
