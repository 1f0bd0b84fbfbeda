"""kill -9 inside a graph computation: in the middle of a window's iteration cycle, and in the
middle of a window's commit. Real processes (``lockgate run`` in its own process group, so the
SIGKILL takes the Spark JVM too), real Spark; the results are checked against networkx.

1. the first run dies after superstep 3 of the components' iteration cycle in window 0;
2. the second run resumes that window at superstep 4 (the catalog records supersteps 0..3 as
   done by the earlier attempt), finishes it, and dies in window 1's commit, after its first
   sink committed and before the second;
3. the third run completes window 1's commit and finishes; ``lockgate cycles`` lists window 0's
   attempts, the resumed supersteps marked.

After that every sink holds each window once (no row of an id twice in a window), and the
results after every window equal networkx's from scratch over the edges so far.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import lockgate as lg
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.graph.state import StateFolder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from graphref import clustered_edges, digraph, nx_components, nx_distances
from test_iteration import W0, _current, _write

pytestmark = pytest.mark.slow

LOCKGATE = str(Path(sys.executable).with_name("lockgate"))
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
PIPELINE = '''
from datetime import timedelta
import lockgate as lg
from lockgate.graph.library import ConnectedComponents, ShortestPaths

pipeline = lg.Pipeline("graph_kills", cycle_window=timedelta(minutes=1))
links = pipeline.source(lg.FileSource({edges!r}, event_time="ts"), name="links")
g = pipeline.graph(links.select("src", "dst", "weight"), name="web")
g.compute(ConnectedComponents(), name="components").sink(lg.FileSink({out!r} + "/components", key=["id"]),
                                                         name="a_components")
g.compute(ShortestPaths(source=0), name="distances").sink(lg.FileSink({out!r} + "/distances", key=["id"]),
                                                          name="b_distances")
'''


def _run(home: Path, ref: str, fault: str | None = None, superstep: int | None = None) -> int:
    env = {**os.environ, "JAVA_TOOL_OPTIONS": JVM_OPTIONS, "LOCKGATE_CATCHUP": "off"}
    env.pop("LOCKGATE_FAULT", None)
    if fault:
        env["LOCKGATE_FAULT"] = fault
    if superstep is not None:
        env["LOCKGATE_FAULT_SUPERSTEP"] = str(superstep)
    proc = subprocess.Popen([LOCKGATE, "--home", str(home), "run", ref, "--from-window", str(W0),
                             "--to-window", str(W0 + 1)], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    if fault is None:
        assert proc.returncode == 0, out.decode()[-3000:]
    return proc.returncode


def test_kill_9_mid_iteration_and_mid_commit_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    batches = [clustered_edges(40, seed=21, per_vertex=1.4), clustered_edges(15, seed=22, per_vertex=1.2)]
    _write(tmp_path / "edges", batches)
    out, home = tmp_path / "out", tmp_path / "home"
    (tmp_path / "pipe.py").write_text(PIPELINE.format(edges=str(tmp_path / "edges"), out=str(out)))
    ref = f"{tmp_path / 'pipe.py'}:pipeline"

    assert _run(home, ref, fault=f"mid_iteration:{W0}", superstep=3) == -signal.SIGKILL
    folder = StateFolder(SnapshotStore(home / "snapshots").iteration_uri("graph_kills", "components", W0))
    assert folder.last_completed() == 3, "the killed round checkpointed supersteps 0..3 of window 0"

    assert _run(home, ref, fault=f"mid_commit:{W0 + 1}") == -signal.SIGKILL
    assert (out / "components" / f"lg_window={W0 + 1}").is_dir(), "the first sink of window 1 committed"
    assert not (out / "distances" / f"lg_window={W0 + 1}").exists(), "the second sink of window 1 did not"

    _run(home, ref)
    with lg.connect("embedded", home=str(home)) as client:
        assert client.get_job("graph_kills").last_window == W0 + 1
        steps = [s for s in client.list_supersteps("graph_kills", W0) if s.operator == "components"]
    second = [s for s in steps if s.attempt == 2]
    assert [s.superstep for s in second if s.resumed] == [0, 1, 2, 3], "attempt 2 resumed after superstep 3"
    assert second[4].superstep == 4 and not second[4].resumed and second[-1].halted_by == "no_messages"
    # the CLI lists the window's attempts with their supersteps, the resumed ones and the halt named
    listing = subprocess.run([LOCKGATE, "--home", str(home), "cycles", "graph_kills", "--window", str(W0)],
                             capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0, listing.stderr[-2000:]
    lines = listing.stdout.splitlines()
    resumed = [ln for ln in lines if "components superstep" in ln and "(done by an earlier attempt" in ln]
    assert [int(ln.split("superstep")[1].split(":")[0]) for ln in resumed] == [0, 1, 2, 3], listing.stdout
    assert any("components superstep" in ln and "halted: no messages" in ln for ln in lines), listing.stdout
    assert any(ln.startswith(f"{W0} ") and " 2 " in ln and "COMMITTED" in ln for ln in lines), listing.stdout

    so_far: list = []
    for i, batch in enumerate(batches):
        seen = {(e[0], e[1]) for e in so_far}
        so_far += [e for e in batch if (e[0], e[1]) not in seen]
        g = digraph(so_far)
        for sink, column in (("components", "component"), ("distances", "distance")):
            log = ds.dataset(out / sink, format="parquet", partitioning="hive").to_table().to_pandas()
            assert not log.duplicated(["lg_window", "id"]).any(), f"{sink}: an id twice in a window"
            got = _current(log, W0 + i, column)
            want = nx_components(g) if sink == "components" else nx_distances(g, 0)
            assert got == want, f"{sink} after window {i}"
