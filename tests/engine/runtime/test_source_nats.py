"""NatsSource against a real NATS JetStream server (``nats_url``: the machine's, or one of the
session's own), each test on a stream of its own, deleted at the end.

Messages are published now (JetStream stamps their arrival), with an event time ``ts`` in the
payload a little before it; a pipeline with 1 s cycle windows writes every record (with its
arrival column) and a 1 s tumbling count/sum per key to collect sinks. Results are compared
with pandas over the published records; the sequence ranges each window read are read back
from the checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from nats_log import Log, next_window, publish_payloads
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

import lockgate
from lockgate.checkpoint.catalog import Catalog
from lockgate.errors import InvalidRecordsError, SourceRefusedError, SourceUnavailableError
from lockgate.runtime.nats import LogSlice, read_range
from lockgate.runtime.nats_records import to_table

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline({job!r}, cycle_window=timedelta(seconds=1),
                       watermark=lg.Watermark(lateness=timedelta(seconds=1)))
bids = pipeline.source(lg.NatsSource({url!r}, {stream!r}, subject={subject!r}, event_time="ts",
                                     schema="id BIGINT, k STRING, v BIGINT, ts TIMESTAMP", arrival="arrived",
                                     invalid={invalid!r}), name="bids")
bids.sink(lg.CollectSink("raw"), name="raw_out")
'''
AGGREGATE = '''
(bids.key_by("k").window(lg.Tumbling(timedelta(seconds=1)))
     .aggregate(n=lg.count(), total=lg.sum("v"), name="per_key")
     .sink(lg.CollectSink("agg"), name="agg_out"))
'''


@pytest.fixture
def log(nats_url: str) -> Iterator[Log]:
    made = Log(nats_url)
    yield made
    if made.created:
        with contextlib.suppress(Exception):  # the server of an outage test may be gone
            made.admin("delete")


# -- helpers -----------------------------------------------------------------------------------
def pipeline_ref(tmp_path: Path, log: Log, job: str, url: str | None = None, invalid: str | None = None,
                 subject: str | None = None, aggregate: bool = False) -> str:
    """A pipeline writing every record to ``raw`` (and, with ``aggregate``, a 1 s tumbling count
    and sum per key to ``agg``)."""
    path = tmp_path / f"{job}.py"
    text = PIPELINE + (AGGREGATE if aggregate else "")
    path.write_text(text.format(job=job, url=url or log.url, stream=log.stream, subject=subject, invalid=invalid))
    return f"{path}:pipeline"


def wait_past(client, ref: str, window: int) -> None:
    """Sleep until ``window`` has ended (a NATS window is read once it has): windows are 1 s from
    the epoch, so window ``w`` ends at ``w + 1`` seconds."""
    del client, ref
    time.sleep(max(0.0, window + 1 + 0.05 - time.time()))


def window_of(client, ref: str, t: datetime) -> int:
    return client.windows_for(ref, t, t + timedelta(microseconds=1))[0]


def ranges(home: Path, job: str, source: str = "bids") -> dict[int, list[int]]:
    """window -> [first, last] sequence range of its complete checkpoint."""
    cat = Catalog(f"sqlite:///{home / 'catalog.db'}")
    try:
        return {cp.window: cp.positions[source]["offset_ranges"]["0"] for cp in cat.list_checkpoints(job)}
    finally:
        cat.close()


def sink_rows(client, job: str, name: str) -> pd.DataFrame:
    return client.read_sink(job, name).to_pandas()


def utc(series: pd.Series) -> pd.Series:
    s = pd.to_datetime(series)
    s = s.dt.tz_localize("UTC") if s.dt.tz is None else s.dt.tz_convert("UTC")
    return s.astype("datetime64[us, UTC]")


def expected_agg(records: pd.DataFrame) -> pd.DataFrame:
    df = records.copy()
    df["window_start"] = utc(df["ts"]).dt.floor("1s")
    out = df.groupby(["window_start", "k"]).agg(n=("v", "size"), total=("v", "sum")).reset_index()
    return out.sort_values(["window_start", "k"]).reset_index(drop=True)


def got_agg(client, job: str) -> pd.DataFrame:
    got = sink_rows(client, job, "agg")
    got["window_start"] = utc(got["window_start"])
    got = got[["window_start", "k", "n", "total"]].sort_values(["window_start", "k"]).reset_index(drop=True)
    return got.astype({"n": "int64", "total": "int64"})


@pytest.fixture
def client(spark, tmp_path):
    c = lockgate.connect("embedded", home=str(tmp_path / "home"))
    yield c
    c.close()


# -- tests -------------------------------------------------------------------------------------
def test_windows_read_the_published_messages_ranges_checkpointed_replay_exact(client, log, tmp_path):
    home, job = tmp_path / "home", "nats_exact"
    ref = pipeline_ref(tmp_path, log, job, aggregate=True)
    a = next_window()
    log.publish(10)
    assert next_window() == a + 1
    log.publish(10)
    assert next_window() == a + 2
    log.publish(6)
    wait_past(client, ref, a + 3)
    assert client.run(ref, first=a, last=a + 1).state == "FINISHED"

    # every published message of the windows once, in the window its arrival falls in, with its fields
    raw = sink_rows(client, job, "raw").sort_values("id").reset_index(drop=True)
    pub = log.frame()
    assert raw["id"].tolist() == list(range(20))
    assert raw["k"].tolist() == pub["k"][:20].tolist() and raw["v"].tolist() == pub["v"][:20].tolist()
    assert (utc(raw["ts"]) == utc(pub["ts"][:20])).all()
    arrived = utc(raw["arrived"])
    assert (arrived >= utc(raw["ts"])).all(), "arrival (the JetStream timestamp) is at or after the event time"
    assert [window_of(client, ref, t.to_pydatetime()) for t in arrived] == raw["lg_window"].tolist()
    assert raw["lg_window"].tolist() == [a] * 10 + [a + 1] * 10

    # each window's range in its checkpoint
    got = ranges(home, job)
    assert got == {a: [1, 10], a + 1: [11, 20]}

    # a restore re-reads exactly the same messages, even with more published since
    before_raw = raw
    log.publish(4)  # arrives after every window run here: never read by them
    client.restore(job, a)
    assert client.run(ref, first=a + 1, last=a + 1).state == "FINISHED"
    pd.testing.assert_frame_equal(sink_rows(client, job, "raw").sort_values("id").reset_index(drop=True), before_raw)
    assert ranges(home, job) == got

    # the next run starts after the last committed sequence and reads the next messages once
    assert client.run(ref, first=a + 2, last=a + 3).state == "FINISHED"  # a + 3 closes a + 2's tumbling windows
    assert ranges(home, job) == {**got, a + 2: [21, 26], a + 3: [27, 26]}
    assert sorted(sink_rows(client, job, "raw")["id"]) == list(range(26))
    pd.testing.assert_frame_equal(got_agg(client, job), expected_agg(log.frame()[:26]))


def test_purged_stream_fails_the_window_naming_the_missing_sequences(client, log, tmp_path):
    home, job = tmp_path / "home", "nats_purged"
    ref = pipeline_ref(tmp_path, log, job)
    a = next_window()
    log.publish(5)
    assert next_window() == a + 1
    log.publish(4)
    wait_past(client, ref, a + 1)
    assert client.run(ref, first=a, last=a).state == "FINISHED"
    log.admin("purge")
    with pytest.raises(SourceRefusedError) as err:
        client.run(ref, first=a + 1, last=a + 1)
    message = str(err.value)
    assert "\n" not in message
    assert f"NATS source stream {log.stream!r}" in message and "no longer holds sequences" in message
    assert "max_age" in message and "nothing of the window was committed" in message
    assert "no longer holds sequences 6..9" in message
    assert ranges(home, job) == {a: [1, 5]}
    assert sorted(sink_rows(client, job, "raw")["id"]) == list(range(5))


def test_unreachable_server_is_source_unavailable_and_commits_nothing(client, log, tmp_path):
    from private_nats import free_port

    home, job = tmp_path / "home", "nats_down"
    ref = pipeline_ref(tmp_path, log, job, url=f"nats://127.0.0.1:{free_port()}")
    w = window_of(client, ref, datetime.now(UTC)) - 2
    t = time.monotonic()
    with pytest.raises(SourceUnavailableError) as err:
        client.run(ref, first=w, last=w)
    assert time.monotonic() - t < 15
    message = str(err.value)
    assert "\n" not in message and "is unavailable (connection refused" in message
    assert "nothing of the window was read or committed" in message
    assert ranges(home, job) == {}


def test_server_stopped_mid_run_then_the_next_run_completes(client, private_nats, tmp_path):
    log = Log(private_nats.url)
    home, job = tmp_path / "home", "nats_outage"
    ref = pipeline_ref(tmp_path, log, job)
    a = next_window()
    log.publish(6)
    assert next_window() == a + 1
    log.publish(4)
    wait_past(client, ref, a + 2)
    assert client.run(ref, first=a, last=a).state == "FINISHED"
    done = ranges(home, job)
    assert done == {a: [1, 6]}

    private_nats.stop()
    with pytest.raises(SourceUnavailableError) as err:
        client.run(ref, first=a + 1, last=a + 2)
    assert "\n" not in str(err.value) and f"127.0.0.1:{private_nats.port} is unavailable" in str(err.value)
    assert ranges(home, job) == done  # nothing half-committed
    assert sorted(sink_rows(client, job, "raw")["id"]) == list(range(6))

    private_nats.start()
    assert client.run(ref, first=a + 1, last=a + 2).state == "FINISHED"
    assert sorted(sink_rows(client, job, "raw")["id"]) == list(range(10))
    assert ranges(home, job) == {a: [1, 6], a + 1: [7, 10], a + 2: [11, 10]}


def test_invalid_messages_skip_counts_and_fail_names_the_sequences(client, log, tmp_path):
    job = "nats_invalid"
    a = next_window()
    log.publish(3)
    log.raw([b'{"id": "abc", "k": "x", "v": 1, "ts": "2026-01-01T00:00:00Z"}', b"not json"])
    log.publish(2)
    late = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()  # event time far behind its arrival
    log.raw([json.dumps({"id": 99, "k": "x", "v": 1, "ts": late}).encode()])
    ref = pipeline_ref(tmp_path, log, job, invalid="skip")
    wait_past(client, ref, a)
    run = client.run(ref, first=a, last=a)
    assert run.state == "FINISHED" and run.late_rows == 1 and run.rows_in == 6  # the late one read, dropped
    assert sorted(sink_rows(client, job, "raw")["id"]) == list(range(5))
    assert sum(c.invalid_rows for c in client.list_cycles(job).cycles) == 2

    ref = pipeline_ref(tmp_path, log, "nats_invalid_fail")
    with pytest.raises(InvalidRecordsError) as err:
        client.run(ref, first=a, last=a)
    assert "2 messages (sequences 4, 5) do not parse into the declared schema" in str(err.value)
    assert "invalid='skip'" in str(err.value)


def test_event_time_from_the_payload_and_a_null_one_fails_whatever_the_rule():
    schema = StructType([StructField("id", LongType()), StructField("k", StringType()),
                         StructField("ts", TimestampType()), StructField("arrived", TimestampType())])
    cfg = {"stream": "s", "event_time": "ts", "arrival": "arrived", "format": "json", "invalid": "skip"}
    piece = LogSlice(seqs=[7, 8], arrivals=[1_000_000, 2_000_000],
                     payloads=[b'{"id": 1, "k": "a", "ts": "2026-01-01T00:00:00.5Z", "extra": 1}',
                               b'{\n "id": 2,\n "ts": "2026-01-01 00:00:01"\n}'], ranges={"0": [7, 8]})
    table, invalid = to_table(cfg, schema, piece)
    assert invalid == 0 and table.column_names == ["id", "k", "ts", "arrived"]
    assert table["ts"].to_pylist() == [datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC),
                                       datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)]
    assert table["arrived"].cast(pa.int64()).to_pylist() == [1_000_000, 2_000_000]
    assert table["k"].to_pylist() == ["a", None]
    piece.payloads.append(b'{"id": 3}')
    piece.seqs.append(9)
    piece.arrivals.append(3_000_000)
    with pytest.raises(InvalidRecordsError) as err:
        to_table(cfg, schema, piece)
    assert "1 message (sequence 9) have no event time" in str(err.value)


def test_thousands_of_messages_read_well_under_a_second(log):
    n = 5000
    asyncio.run(publish_payloads(log.url, log.stream, [(f"{log.stream}.bids", b'{"id": %d}' % i) for i in range(n)],
                         create=True))
    log.created = True
    cfg = {"url": log.url, "stream": log.stream, "subject": None}
    now = int(time.time() * 1_000_000) + 1
    time.sleep(0.01)
    t = time.perf_counter()
    piece = read_range(cfg, now - 600_000_000, now, None)
    elapsed = time.perf_counter() - t
    assert piece.seqs == list(range(1, n + 1)) and piece.ranges == {"0": [1, n]}
    assert elapsed < 1.0, f"{n} messages took {elapsed:.2f} s"
    cut = piece.arrivals[n // 2]  # a window ending there takes the messages before it
    half = read_range(cfg, now - 600_000_000, cut, 1)
    assert half.seqs == [s for s, a in zip(piece.seqs, piece.arrivals, strict=True) if a < cut]
    rest = read_range(cfg, cut, now, half.ranges["0"][1] + 1)
    assert rest.ranges["0"] == [half.ranges["0"][1] + 1, n]
