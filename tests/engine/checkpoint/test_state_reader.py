"""Reading a checkpoint's state without Spark: layers merged newest first, timestamps as UTC
microseconds whichever writer wrote each layer (a layer of Spark's INT96 timestamps and one of
microseconds marked UTC in one chain)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from lockgate.checkpoint.layers import BASE, DELTA
from lockgate.checkpoint.state_reader import read_state_table

T0 = datetime(2026, 1, 1, 0, 0, 20, 50_000)


def _layer(tmp_path, name: str, kind: str, table: pa.Table, int96: bool) -> dict:
    folder = tmp_path / name / "dedup.main"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-0.parquet", use_deprecated_int96_timestamps=int96)
    return {"snapshot": str(tmp_path / name), "kind": kind, "files": [{"path": "part-0.parquet"}], "rows": table.num_rows}


def test_a_chain_of_int96_and_microsecond_layers_reads_as_utc_microseconds(tmp_path):
    # a state column of the user's (not one of the window columns shown as timestamps anyway)
    base = pa.table({"k": [1, 2], "last": pa.array([T0, T0], pa.timestamp("ns"))})  # as Spark's INT96 reads
    later = T0.replace(second=30, tzinfo=UTC)
    delta = pa.table({"k": [2, 3], "last": pa.array([later, later], pa.timestamp("us", tz="UTC")),
                      "__lg_del": [False, False]})
    layers = [_layer(tmp_path, "s1", BASE, base, int96=True), _layer(tmp_path, "s2", DELTA, delta, int96=False)]
    assert pq.read_schema(tmp_path / "s1" / "dedup.main" / "part-0.parquet").field("last").type == pa.timestamp("ns")
    out = read_state_table(None, "dedup.main", {"layers": layers, "identity": ["k"]})
    assert out.schema.field("last").type == pa.timestamp("us", tz="UTC")
    got = sorted(zip(out["k"].to_pylist(), out["last"].to_pylist(), strict=True))
    assert got == [(1, T0.replace(tzinfo=UTC)), (2, later), (3, later)]
