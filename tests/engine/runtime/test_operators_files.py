"""FileSource over Parquet, CSV and JSON files sliced by event time, run through the
embedded client and checked against pandas over the records the test wrote.

Each file holds records of several cycle windows, in no order, plus records before the
first and after the last window run; every record must be read exactly once, in the cycle
window holding its event time, and a window aggregate over the union of the three
sources must match pandas.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (
    CYCLE_US,
    W0,
    S,
    aggregate,
    assert_same_rows,
    dt,
    embedded_client,
    emit_cycle,
    read_sink,
    tumbling,
)

LAST = W0 + 2
SCHEMA = "k STRING, v BIGINT, ts TIMESTAMP"
FORMATS = ("parquet", "csv", "json")


def files_pipeline() -> lg.Pipeline:
    root = os.environ["LG_TEST_FILE_ROOT"]
    p = lg.Pipeline("op_files", cycle_window=timedelta(seconds=10), parallelism=2)
    streams = []
    for fmt in FORMATS:
        schema = None if fmt == "parquet" else SCHEMA  # Parquet: read from the files
        src = p.source(lg.FileSource(f"{root}/{fmt}", format=fmt, event_time="ts", schema=schema), name=fmt)
        src.sink(lg.CollectSink(fmt), name=f"{fmt}_out")
        streams.append(src.select("k", "v", "ts", f"'{fmt}' AS fmt", name=f"{fmt}_tagged"))
    (
        streams[0]
        .union(*streams[1:], name="all_formats")
        .key_by("k")
        .window(lg.Tumbling(timedelta(seconds=5)))
        .aggregate(name="per_key", n=lg.count(), total=lg.sum("v"), values=lg.collect("v"))
        .sink(lg.CollectSink("per_key"), name="per_key_out")
    )
    return p


def make_records(fmt_index: int, n: int = 240) -> pd.DataFrame:
    """Records from 5 s before the first window to 5 s after the last, shuffled; some lie
    exactly on cycle and 5 s boundaries; a few have a null key."""
    rng = np.random.default_rng(fmt_index)
    start, end = W0 * CYCLE_US - 5 * S, (LAST + 1) * CYCLE_US + 5 * S
    ts = rng.integers(start, end, n) // 1000 * 1000  # millisecond precision (text formats)
    ts[:6] = [
        W0 * CYCLE_US,
        (W0 + 1) * CYCLE_US,
        (W0 + 1) * CYCLE_US + 5 * S,
        (LAST + 1) * CYCLE_US,
        start,
        end - 1000,
    ]
    keys = rng.choice(["a", "b", "c", None], n, p=[0.4, 0.3, 0.25, 0.05])
    v = np.arange(n) + 1000 * fmt_index
    return pd.DataFrame({"k": keys, "v": v, "ts_us": ts}).sample(frac=1, random_state=fmt_index)


def write(fmt: str, df: pd.DataFrame, folder: Path) -> None:
    folder.mkdir(parents=True)
    half = len(df) // 2
    for i, part in enumerate((df.iloc[:half], df.iloc[half:])):  # two files, each spanning every window
        if fmt == "parquet":
            table = pa.table(
                {
                    "k": pa.array(part["k"], pa.string()),
                    "v": pa.array(part["v"], pa.int64()),
                    "ts": pa.array(part["ts_us"], pa.timestamp("us", tz="UTC")),
                }
            )
            pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=50)
        else:
            iso = [dt(t).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" for t in part["ts_us"]]
            out = part.assign(ts=iso)[["k", "v", "ts"]]
            if fmt == "csv":
                out.to_csv(folder / f"part-{i}.csv", index=False)
            else:
                with open(folder / f"part-{i}.json", "w") as f:
                    for rec in out.to_dict("records"):
                        k = None if pd.isna(rec["k"]) else rec["k"]
                        f.write(json.dumps({"k": k, "v": int(rec["v"]), "ts": rec["ts"]}) + "\n")


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_files"))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("op_file_sources")
    out = {}
    for i, fmt in enumerate(FORMATS):
        out[fmt] = make_records(i)
        write(fmt, out[fmt], root / fmt)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LG_TEST_FILE_ROOT", str(root))
        yield out


@pytest.fixture(scope="module")
def run(client, records):
    return client.run(f"{__file__}:files_pipeline", first=W0, last=LAST)


def in_run(df: pd.DataFrame) -> pd.DataFrame:
    cycle = df["ts_us"] // CYCLE_US
    return df[(cycle >= W0) & (cycle <= LAST)].assign(ts=lambda f: f["ts_us"], lg_window=cycle)


@pytest.mark.parametrize("fmt", FORMATS)
def test_file_source_slices_by_event_time(client, run, records, fmt):
    assert run.state == "FINISHED"
    expected = in_run(records[fmt])
    assert len(expected) < len(records[fmt]), "records outside the run's windows are never read"
    result = read_sink(client, "op_files", fmt)
    # CSV reads an empty field as null, like JSON's null and Parquet's null
    assert_same_rows(result, expected[["k", "v", "ts", "lg_window"]], ["v"], what=f"{fmt} source")


def test_window_aggregate_over_the_union_of_file_sources(client, run, records):
    assert run.rows_in == sum(len(in_run(r)) for r in records.values())
    everything = pd.concat([in_run(r) for r in records.values()], ignore_index=True)
    expected = aggregate(
        tumbling(everything, 5 * S),
        ["window_start", "window_end", "k"],
        {"n": ("count", None), "total": ("sum", "v"), "values": ("collect", "v")},
    )
    expected["lg_window"] = emit_cycle(expected["window_end"].to_numpy())
    assert expected["k"].isna().any()
    result = read_sink(client, "op_files", "per_key")
    assert_same_rows(result, expected, ["window_start", "k"], what="tumbling over files")
