"""OpenLineage for the operators that run pipelines (the ``lineage`` extra).

With ``apache-airflow-providers-openlineage`` installed and a transport configured, Airflow
asks :class:`~lockgate_provider.operators.lockgate.LockgateRunWindowsOperator`,
:class:`~lockgate_provider.operators.lockgate.LockgateStartPipelineOperator` and
:class:`~lockgate_provider.operators.lockgate.LockgateRestoreOperator` for their lineage at
the start and the end of a task. They answer from the job's compiled plan (read from the
controller or the embedded catalog, never recompiled):

* one **input dataset per source** and one **output dataset per sink**, named by
  OpenLineage's naming conventions (:func:`dataset_name`), each with a **schema** facet;
* the rows each sink committed over the task's windows (**output statistics**, from the
  windows' checkpoints);
* a ``lockgateWindows`` **run facet**: the job, its plan version and the range of cycle
  windows the task covered, as window ids and as event-time instants;
* a **SQL job facet** with the queries of ``Pipeline.sql`` (and ``Stream.sql``) in the plan,
  and a job type facet (``BATCH`` for a range of windows, ``STREAMING`` for a continuous run).

Without the OpenLineage provider nothing here is imported by anything (the classes are
imported inside the functions), and a lineage that cannot be built (the controller away, a
plan that is not there yet) is logged and left out: lineage never fails a task.

Naming (:func:`dataset_name`)::

    >>> dataset_name({"kind": "file", "path": "/data/bids"}, "j")
    ('file', '/data/bids')
    >>> dataset_name({"kind": "delta", "path": "s3a://lake/sales/orders"}, "j")
    ('s3://lake', 'sales/orders')
    >>> dataset_name({"kind": "postgres", "url": "postgresql://u:secret@db:5433/shop", "table": "orders"}, "j")
    ('postgres://db:5433', 'shop.public.orders')
    >>> dataset_name({"kind": "nats", "url": "nats://broker:4222", "stream": "bids"}, "j")
    ('nats://broker:4222', 'bids')
    >>> dataset_name({"kind": "iceberg", "table": "feeds.bids_{job}", "warehouse": "s3://lake/wh"}, "ingest")
    ('s3://lake', 'wh/feeds.db/bids_ingest')
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: the OpenLineage integration name of Lockgate's facets
INTEGRATION = "LOCKGATE"
#: where the ``lockgateWindows`` run facet's fields are described
#: (not published: the ``.invalid`` host says so; the fields are those of the class below)
WINDOWS_FACET_SCHEMA = "https://lockgate.invalid/spec/facets/1-0-0/LockgateWindowsRunFacet.json"

_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "abfss": "abfss", "wasbs": "wasbs"}


# -- naming ----------------------------------------------------------------------------------
def location_name(location: str) -> tuple[str, str]:
    """``(namespace, name)`` of a file or object-store location, by OpenLineage's naming spec:
    a local path is ``file`` + its absolute path, ``s3://bucket`` + key, ``gs://bucket`` + key,
    ``hdfs://host:port`` + path, ``abfss://container@account...`` + path.

    >>> location_name("file:///tmp/out/"), location_name("hdfs://nn:8020/warehouse/t")
    (('file', '/tmp/out'), ('hdfs://nn:8020', '/warehouse/t'))
    """
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and location[1:2] == ":"):  # a path (or C:\...)
        path = parts.path if scheme == "file" else location
        return "file", os.path.abspath(path).rstrip("/") or "/"
    if scheme in _OBJECT_STORES:
        return f"{_OBJECT_STORES[scheme]}://{parts.netloc}", parts.path.strip("/")
    return f"{scheme}://{parts.netloc}", parts.path.rstrip("/") or "/"


def _host_port(url: str, scheme: str, default_port: int) -> str:
    """``scheme://host:port`` of ``url`` (the first server of a list), credentials left out."""
    first = url.split(",")[0].strip()
    parts = urlsplit(first if "://" in first else f"{scheme}://{first}")
    host = parts.hostname or "localhost"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{parts.port or default_port}"


def dataset_name(config: Mapping[str, Any], job: str) -> tuple[str, str]:
    """``(namespace, name)`` of a source's or a sink's dataset (its plan config) by OpenLineage's
    naming conventions; never a password."""
    kind = config.get("kind")
    if kind in ("file", "delta"):
        return location_name(str(config["path"]))
    if kind == "postgres":
        namespace = _host_port(str(config["url"]), "postgres", 5432)
        database = (urlsplit(str(config["url"])).path or "/").strip("/") or "postgres"
        table = str(config["table"])
        schema, _, name = table.rpartition(".")
        return namespace, f"{database}.{schema or 'public'}.{name}"
    if kind == "nats":
        return _host_port(str(config["url"]), "nats", 4222), str(config["stream"])
    if kind == "iceberg":
        table = str(config["table"]).replace("{job}", job)
        namespace, _, name = table.rpartition(".")
        namespace = namespace or "default"
        if config.get("warehouse"):  # the table's location in its warehouse (the SQL catalog's layout)
            return location_name(f"{str(config['warehouse']).rstrip('/')}/{namespace}.db/{name}")
        return f"iceberg://{config.get('catalog_name') or 'lockgate'}", f"{namespace}.{name}"
    if kind == "nexmark":
        return "nexmark", str(config.get("stream") or "bid")
    if kind == "collect":
        return "lockgate", f"{job}.collect.{config.get('name')}"
    return f"lockgate+{kind}", str(config.get("path") or config.get("table") or config.get("name") or kind)


# -- the plan's datasets ----------------------------------------------------------------------
def plan_datasets(logical: Mapping[str, Any], job: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(inputs, outputs)`` of a logical plan (``PlanInfo.logical``): for each source and each
    sink, its operator, namespace, name and schema (``[(column, type)]``), in plan order."""
    inputs, outputs = [], []
    for v in logical.get("vertices") or []:
        kind = v.get("kind")
        key = "source" if kind == "SOURCE" else "sink" if kind == "SINK" else None
        if key is None or key not in (v.get("config") or {}):
            continue
        namespace, name = dataset_name(v["config"][key], job)
        schema = [(c["name"], str(c.get("type"))) for c in v.get("schema") or []]
        entry = {"operator": v["id"], "namespace": namespace, "name": name, "schema": schema,
                 "kind": v["config"][key].get("kind")}
        (inputs if key == "source" else outputs).append(entry)
    return inputs, outputs


def plan_queries(logical: Mapping[str, Any]) -> list[str]:
    """The SQL of the plan: ``Pipeline.sql``'s queries, then ``Stream.sql``'s, in plan order."""
    queries = [q for q in (logical.get("sql") or {}).values() if q]
    queries += [v["config"]["query"] for v in logical.get("vertices") or []
                if v.get("op") == "sql" and (v.get("config") or {}).get("query")]
    return queries


# -- OpenLineage objects (imported only here) ----------------------------------------------------
@cache
def _windows_facet_class() -> type:
    from attrs import define
    from openlineage.client.facet_v2 import RunFacet

    @define
    class LockgateWindowsRunFacet(RunFacet):
        """The cycle windows a task of a Lockgate pipeline ran (or restored to)."""

        job: str
        planVersion: str | None
        firstWindow: int | None
        lastWindow: int | None
        windowStart: str | None = None
        windowEnd: str | None = None

        @staticmethod
        def _get_schema() -> str:
            return WINDOWS_FACET_SCHEMA

    return LockgateWindowsRunFacet


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def build_lineage(
    logical: Mapping[str, Any] | None,
    *,
    job: str,
    plan_version: str | None = None,
    first: int | None = None,
    last: int | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    rows_out: int | None = None,
    sink_rows: Mapping[str, int] | None = None,
    streaming: bool = False,
) -> Any:
    """The ``OperatorLineage`` of a task that ran (or restored) ``job``'s windows ``first..last``:
    ``sink_rows`` (by sink) or, for a pipeline of one sink, ``rows_out`` give the output statistics."""
    from airflow.providers.common.compat.openlineage.facet import (
        InputDataset,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
        SQLJobFacet,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.generated.job_type_job import JobTypeJobFacet

    inputs, outputs = plan_datasets(logical or {}, job)

    def dataset(entry: dict[str, Any], output: bool) -> Any:
        facets: dict[str, Any] = {}
        if entry["schema"]:
            facets["schema"] = SchemaDatasetFacet(
                fields=[SchemaDatasetFacetFields(name=n, type=t) for n, t in entry["schema"]])
        if not output:
            return InputDataset(namespace=entry["namespace"], name=entry["name"], facets=facets)
        rows = (sink_rows or {}).get(entry["operator"])
        if rows is None and rows_out is not None and len(outputs) == 1:
            rows = rows_out
        stats = {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=int(rows))} if rows is not None else {}
        return OutputDataset(namespace=entry["namespace"], name=entry["name"], facets=facets, outputFacets=stats)

    job_facets: dict[str, Any] = {
        "jobType": JobTypeJobFacet(processingType="STREAMING" if streaming else "BATCH", integration=INTEGRATION,
                                   jobType="PIPELINE"),
    }
    queries = plan_queries(logical or {})
    if queries:
        job_facets["sql"] = SQLJobFacet(query=";\n\n".join(queries), dialect="spark")
    run_facets = {"lockgateWindows": _windows_facet_class()(
        job=job, planVersion=plan_version or None, firstWindow=first, lastWindow=last,
        windowStart=_iso(start), windowEnd=_iso(end),
    )}
    return OperatorLineage(
        inputs=[dataset(e, False) for e in inputs], outputs=[dataset(e, True) for e in outputs],
        run_facets=run_facets, job_facets=job_facets,
    )


def job_plan(hook: Any, job: str | None, plan_version: str | None = None, connect: bool = True) -> dict[str, Any] | None:
    """The logical plan of ``job`` (its ``plan_version``, default its current one), or None when
    the job or its plan is not there (yet). ``connect=False``: only through a client the hook
    holds already (a task's start event is built in a forked process, which must not look a
    connection up)."""
    if not job or (not connect and getattr(hook, "_client", None) is None):
        return None
    client = hook.get_conn()
    try:
        return dict(client.get_plan(job, plan_version).logical)
    except Exception as err:  # a job not run yet has no plan: its datasets are not known
        log.info("OpenLineage: no plan of Lockgate job %r yet (%s): no datasets", job, err)
        return None


def range_sink_rows(hook: Any, job: str | None, first: int | None, last: int | None) -> dict[str, int] | None:
    """Rows each sink committed over windows ``first..last``, from their checkpoints; None when a
    window's checkpoint is gone (expired past ``keep_checkpoints``) or says nothing of its sinks."""
    if not job or first is None or last is None or last < first:
        return None
    cps = {c.window: c for c in hook.get_conn().list_checkpoints(job) if first <= c.window <= last}
    if len(cps) != last - first + 1 or not all(getattr(c, "sink_rows", None) for c in cps.values()):
        return None
    totals: dict[str, int] = {}
    for cp in cps.values():
        for sink, rows in cp.sink_rows.items():
            totals[sink] = totals.get(sink, 0) + int(rows)
    return totals


def guarded(what: str, build: Any) -> Any:
    """``build()``, or None (logged) when it fails: lineage never fails a task."""
    try:
        return build()
    except ImportError:
        return None  # no OpenLineage provider: nothing asks for lineage
    except Exception:
        log.warning("OpenLineage: the lineage of %s could not be built; the task goes on without it", what,
                    exc_info=True)
        return None


__all__ = ["build_lineage", "dataset_name", "guarded", "job_plan", "location_name", "plan_datasets", "plan_queries",
           "range_sink_rows"]
