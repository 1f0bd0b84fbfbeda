"""``examples/nats_bids.py`` as the README runs it: a live bid feed published to JetStream, the
pipeline run over it, each feed's windows committed to Parquet and to a Delta table of the job's
own; every published bid counted once, read back with delta-rs and pyarrow (not Lockgate)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.dataset as ds
from deltalake import DeltaTable
from nats_log import Log

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nats_bids.py"


def test_the_example_counts_every_published_bid_once_in_parquet_and_delta(nats_url, tmp_path):
    log = Log(nats_url)
    log.stream = f"lg_example_{uuid.uuid4().hex[:10]}"
    out = tmp_path / "out"
    env = {**os.environ, "LOCKGATE_HOME": str(tmp_path / "home"), "LOCKGATE_EXAMPLES_OUT": str(out),
           "LOCKGATE_NATS_URL": nats_url, "LOCKGATE_NATS_STREAM": log.stream}
    try:
        proc = subprocess.run([sys.executable, str(EXAMPLE), "--seconds", "2", "--events-per-second", "100"],
                              env=env, capture_output=True, text=True, timeout=600)
    finally:
        log.created = True
        log.admin("delete")
    assert proc.returncode == 0, proc.stderr[-3000:]
    published = int(re.search(r"published (\d+) bids", proc.stdout).group(1))
    job = re.search(r"^(nats_bids_\w+) FINISHED", proc.stdout, re.M).group(1)
    assert published == 184  # 200 events, 46 of every 50 are bids
    table = DeltaTable(str(out / "nats_bids" / "delta" / job))
    delta = table.to_pyarrow_table()
    # each bid once: counted in its window, or (a stalled publisher on a busy machine) set aside as late
    late = int(re.search(r"bids in \((\d+) late\)", proc.stdout).group(1))
    set_aside = out / "nats_bids" / "late" / "bids"
    assert (ds.dataset(str(set_aside), format="parquet", partitioning="hive").count_rows()
            if set_aside.exists() else 0) == late
    assert sum(delta.column("bids").to_pylist()) + late == published
    windows = sorted(set(delta.column("lg_window").to_pylist()))
    assert table.version() >= len(windows)  # one commit per window (windows with no rows commit too)
    parquet = ds.dataset(str(out / "nats_bids" / "per_auction"), format="parquet", partitioning="hive").to_table()
    assert _rows(parquet) == _rows(delta) and len(_rows(delta)) > 0


def _rows(table) -> list[tuple]:
    cols = ["lg_window", "auction", "bids", "max_price"]
    return sorted(tuple(r[c] for c in cols) for r in table.select(cols).to_pylist())
