"""Bad requests to a real controller (token, confined pipelines, a worker), on purpose: each
gets its status code and a message, nothing runs that should not, the controller stays up and
its catalog stays sound. Window ids at the edge of the range fail at once and are never
retried; pipeline references from outside the pipelines folder are refused before any import;
sink names and timeouts are checked; oversized and malformed messages are refused; 50 clients
at once; and a Hypothesis fuzz of every client RPC, with and without the token."""

from __future__ import annotations

import math
import re
import sqlite3
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lockgate.checkpoint.catalog import Catalog
from lockgate.errors import InvalidArgumentError, PipelineLoadError, PipelineRefusedError, SinkNotFoundError
from lockgate.server.generated import lockgate_controller_pb2 as pb
from lockgate.server.generated import lockgate_controller_pb2_grpc as pb_grpc
from lockgate.server.limits import MAX_WINDOW

TOKEN = "requests-test-token"
GOOD = (("authorization", f"Bearer {TOKEN}"),)
WRONG = (("authorization", "Bearer not-the-token"),)
#: what a client may be answered; never INTERNAL, UNKNOWN or UNAVAILABLE (the controller broke)
EXPECTED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.RESOURCE_EXHAUSTED}


@pytest.fixture(scope="module")
def env(tmp_path_factory, request):
    srv = request.getfixturevalue("srv")
    root = tmp_path_factory.mktemp("requests")
    pipes = root / "pipelines"
    ref, _ = srv.write_pipeline(pipes, "fz", 2000)
    (pipes / "not_a_pipeline.py").write_text("import os\nevil = os.getpid\n\ndef helper():\n    return 1\n")
    (pipes / "exits.py").write_text("import os\nos._exit(7)\n")
    (pipes / "aborts.py").write_text("import os\nos.abort()\n")
    home = root / "ctl" / "home"
    mods = home / "lgtest_mods"  # the workers' folder is the home: importable there
    mods.mkdir(parents=True)
    (mods / "__init__.py").write_text("")
    (mods / "raising.py").write_text("raise RuntimeError('this module breaks on import')\n")
    ctl = srv.ControllerProcess(root / "ctl", name="req", token=TOKEN, args=(
        "--standby-workers", "1", "--pipelines", str(pipes), "--pipeline-modules", "lgtest_mods",
        "--max-restarts", "3"))
    ctl.start()
    client = ctl.client()
    res = client.run(ref, job="fz", first=srv.FIRST, last=srv.FIRST)
    assert res.state == "FINISHED", res
    channel = grpc.insecure_channel(f"127.0.0.1:{ctl.port}")
    yield {"srv": srv, "ctl": ctl, "client": client, "ref": ref, "pipes": pipes, "home": home, "root": root,
           "stub": pb_grpc.ControllerStub(channel), "channel": channel}
    channel.close()
    client.close()
    left = ctl.cleanup()
    assert not left, f"workers outlived the controller: {left}"


def _call(stub, method, req, metadata=GOOD, timeout=60):
    """(status, details) of one call; a stream is read to its end."""
    try:
        out = getattr(stub, method)(req, metadata=metadata, timeout=timeout)
        if not hasattr(out, "ListFields"):
            list(out)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


def test_window_ids_at_the_edge_fail_fast_and_are_never_retried(env):
    stub, ctl = env["stub"], env["ctl"]
    spawned = ctl.log_text().count("worker_spawned")
    t0 = time.monotonic()
    code, msg = _call(stub, "Run", pb.RunRequest(pipeline=env["ref"], job="edge", first=2**63 - 1, last=2**63 - 1))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "out of range" in msg, (code, msg)
    assert time.monotonic() - t0 < 5
    for req in (pb.RunRequest(pipeline=env["ref"], job="edge", first=-1, last=3),
                pb.RunRequest(pipeline=env["ref"], job="edge", first=0, last=-(2**63))):
        assert _call(stub, "StartRun", req)[0] == grpc.StatusCode.INVALID_ARGUMENT
    for window in (-1, 2**63 - 1):
        code, msg = _call(stub, "Restore", pb.RestoreRequest(job="fz", window=window))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "out of range" in msg
    code, msg = _call(stub, "WindowsFor", pb.WindowsForRequest(pipeline=env["ref"], start_us=-(2**63), end_us=0))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "start_us" in msg

    # a window any clock could have, but not this pipeline's (5 s windows end in the year 9999)
    t0 = time.monotonic()
    code, msg = _call(stub, "Run", pb.RunRequest(pipeline=env["ref"], job="edge", first=MAX_WINDOW, last=MAX_WINDOW),
                      timeout=120)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "out of range for this pipeline" in msg, (code, msg)
    assert time.monotonic() - t0 < 60
    log = ctl.log_text()
    assert "restart_scheduled" not in log and "OverflowError" not in log
    # no respawn loop; when this fails, the worker lines say why each worker was started
    assert log.count("worker_spawned") <= spawned + 1, [ln for ln in log.splitlines() if "worker" in ln][-12:]
    edge = [j for j in env["client"].list_jobs() if j.name == "edge"]
    assert not edge or edge[0].state not in ("RECOVERING", "RUNNING"), edge


def test_pipeline_references_are_confined(env):
    client, pipes, root = env["client"], env["pipes"], env["root"]
    lost_before = {w["id"] for w in client.list_workers() if w["state"] == "LOST"}
    (root / "outside.py").write_text(f"open({str(root / 'ran')!r}, 'w').close()\nimport lockgate as lg\n"
                                     "pipeline = lg.Pipeline('outside')\n")
    refused = [f"{root}/outside.py:pipeline", f"{pipes}/../outside.py:pipeline", "/etc/passwd:pipeline",
               "/no/such/file.py:pipeline", "../../../../outside.py:pipeline", "os:getpid", "subprocess:run",
               f"{pipes}/fz_pipe.txt:pipeline"]
    messages = set()
    for ref in refused:
        with pytest.raises(PipelineRefusedError) as info:
            client.compile(ref)
        messages.add(str(info.value).replace(repr(ref), "REF"))
        with pytest.raises(PipelineRefusedError):
            client.start_run(ref, job="refused", first=0, last=0)
    assert len(messages) == 1, messages  # the same words whether the file exists or not
    assert "--pipelines" in messages.pop()
    assert not (root / "ran").exists()  # nothing outside was imported
    with pytest.raises(PipelineLoadError, match="RuntimeError: this module breaks on import"):
        client.compile("lgtest_mods.raising:pipeline")
    with pytest.raises(PipelineLoadError, match="it was not called"):
        client.compile(f"{pipes}/not_a_pipeline.py:evil")
    with pytest.raises(PipelineLoadError, match="not marked @lockgate.pipeline_factory"):
        client.compile(f"{pipes}/not_a_pipeline.py:helper")
    assert client.compile(env["ref"]).pipeline == "fz"
    assert not [w for w in client.list_workers() if w["state"] == "LOST" and w["id"] not in lost_before]


def test_non_loopback_bind_needs_confined_pipelines(env, tmp_path):
    import subprocess
    import sys

    token = tmp_path / "token"
    token.write_text(TOKEN)
    proc = subprocess.run(
        [sys.executable, "-m", "lockgate.cli.main", "server", "--home", str(tmp_path / "h"), "--host", "0.0.0.0",
         "--port", "0", "--token-file", str(token), "--allow-any-pipeline"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "refusing to bind 0.0.0.0 with --allow-any-pipeline" in proc.stderr, proc.stderr


def test_a_controller_told_no_pipeline_places_refuses_every_reference(env, tmp_path, make_controller):
    ctl = make_controller("closed", args=("--standby-workers", "0"), any_pipeline=False).start()
    assert "every pipeline reference is refused" in ctl.log_text()
    client = ctl.client()
    try:
        with pytest.raises(PipelineRefusedError, match="accepts no pipeline references until it is told where they "
                           "may come from: start it with --pipelines DIR"):
            client.compile(env["ref"])
        assert client.list_jobs() == []
    finally:
        client.close()


def test_sink_names_and_timeouts_are_checked(env):
    stub, home, client = env["stub"], str(env["home"]), env["client"]
    for sink in ("a\x00b", "../x", "a/b", "..", "x" * 500):
        code, msg = _call(stub, "ReadSink", pb.ReadSinkRequest(job="fz", sink=sink))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and home not in msg, (sink, code, msg)
    with pytest.raises(SinkNotFoundError, match=r"no collect sink 'nosuch'; its collect sinks: 'auctions', 'bidders'") \
            as info:
        client.read_sink("fz", "nosuch")
    assert home not in str(info.value)
    assert client.read_sink("fz", "bidders").num_rows > 0
    for bad in (math.nan, math.inf, -math.inf, -1.0, 1e300):
        code, msg = _call(stub, "Watch", pb.WatchRequest(job="fz", timeout_s=bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "timeout_s" in msg, (bad, code, msg)
        assert _call(stub, "Stop", pb.StopRequest(job="fz", timeout_s=bad))[0] == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(InvalidArgumentError, match="timeout_s nan"):
        list(client.watch("fz", timeout=math.nan))
    t0 = time.monotonic()
    assert _call(stub, "Watch", pb.WatchRequest(job="fz", timeout_s=0.5))[0] == grpc.StatusCode.OK
    assert time.monotonic() - t0 < 10
    for job in ("a\x00b", "x" * 500):
        assert _call(stub, "GetJob", pb.JobRequest(job=job))[0] == grpc.StatusCode.INVALID_ARGUMENT
    for job in ("../escape", "a/b", "."):
        code, msg = _call(stub, "Submit", pb.SubmitRequest(pipeline=env["ref"], job=job))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "cannot name a folder" in msg


def test_oversized_malformed_and_unauthenticated_requests(env):
    stub, channel = env["stub"], env["channel"]
    code, msg = _call(stub, "Compile", pb.CompileRequest(pipeline="x" * (5 * 1024 * 1024)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and msg, (code, msg[:200])
    code, msg = _call(stub, "Compile", pb.CompileRequest(pipeline="x" * 10_000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "characters long" in msg
    for method, stream in (("Compile", False), ("GetJob", False), ("Watch", True)):
        factory = channel.unary_stream if stream else channel.unary_unary
        raw = factory(f"/lockgate.v1.Controller/{method}", request_serializer=None, response_deserializer=None)
        code, msg = _call(type("S", (), {"m": staticmethod(raw)}), "m", b"\xff\xff\xff\x0f garbage")
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "does not parse" in msg, (method, code, msg)
    for metadata in ((), WRONG):
        for method, req in (("ListJobs", pb.ListJobsRequest()), ("Watch", pb.WatchRequest(job="fz")),
                            ("Compile", pb.CompileRequest(pipeline=env["ref"]))):
            code, msg = _call(stub, method, req, metadata=metadata)
            assert code == grpc.StatusCode.UNAUTHENTICATED and "bearer token" in msg


def test_fifty_concurrent_clients_each_get_their_answer(env):
    port, ref = env["ctl"].port, env["ref"]
    plan = [("ListJobs", pb.ListJobsRequest(), GOOD, grpc.StatusCode.OK),
            ("GetJob", pb.JobRequest(job="fz"), GOOD, grpc.StatusCode.OK),
            ("GetJob", pb.JobRequest(job="nope"), GOOD, grpc.StatusCode.NOT_FOUND),
            ("Compile", pb.CompileRequest(pipeline="/etc/passwd:x"), GOOD, grpc.StatusCode.PERMISSION_DENIED),
            ("Watch", pb.WatchRequest(job="fz", timeout_s=math.nan), GOOD, grpc.StatusCode.INVALID_ARGUMENT),
            ("ListJobs", pb.ListJobsRequest(), WRONG, grpc.StatusCode.UNAUTHENTICATED),
            ("ListCheckpoints", pb.JobRequest(job="fz"), GOOD, grpc.StatusCode.OK)]
    results: list[tuple[str, grpc.StatusCode, grpc.StatusCode, str]] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def one_client() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
            stub = pb_grpc.ControllerStub(ch)
            start.wait(60)
            for _ in range(4):
                for method, req, md, want in plan:
                    code, msg = _call(stub, method, req, metadata=md, timeout=60)
                    with lock:
                        results.append((method, want, code, msg))

    threads = [threading.Thread(target=one_client) for _ in range(50)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert len(results) == 50 * 4 * len(plan)
    wrong = [(m, w, c, msg) for m, w, c, msg in results if c != w]
    assert not wrong, wrong[:5]
    assert all(msg for _, w, _, msg in results if w != grpc.StatusCode.OK)  # every refusal says why
    assert time.monotonic() - t0 < 120
    assert ref  # the controller answers still
    assert [j.name for j in env["client"].list_jobs() if j.name == "fz"] == ["fz"]


@pytest.mark.slow
def test_fuzz_every_client_rpc_keeps_the_controller_up_and_the_catalog_sound(env):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    stub, ctl, pipes = env["stub"], env["ctl"], env["pipes"]
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
    names = text.filter(lambda s: s != "fz") | st.sampled_from(["", "../x", "a/b", "\x00", "x" * 300, "nope"])
    refs = text | st.sampled_from(["", ":", "/etc/passwd:x", "os:getpid", "../x.py:pipeline", f"{pipes}/../x.py:p",
                                   "lgtest_mods:nothing", "a" * 5000, "\x00.py:p", "json:loads"])
    ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
    floats = st.floats(allow_nan=True, allow_infinity=True)
    opt = lambda s: st.none() | s  # noqa: E731

    def run_request(p, job, first, last, caught_up, master):
        req = pb.RunRequest(pipeline=p, job=job, until_caught_up=caught_up, spark_master=master)
        if first is not None:
            req.first = first
        if last is not None:
            req.last = last
        return req

    def with_timeout(msg, t):
        if t is not None:
            msg.timeout_s = t
        return msg

    def read_state_request(job, operator, window, table):
        msg = pb.ReadStateRequest(job=job, operator=operator, table=table)
        if window is not None:
            msg.window = window
        return msg

    run_requests = st.builds(run_request, refs, names, opt(ints), opt(ints), st.booleans(), text)
    job_requests = st.builds(lambda j: pb.JobRequest(job=j), names | st.just("fz"))
    requests = {
        "Compile": st.builds(lambda p: pb.CompileRequest(pipeline=p), refs),
        "Submit": st.builds(lambda p, j: pb.SubmitRequest(pipeline=p, job=j), refs, names),
        "WindowsFor": st.builds(lambda p, a, b: pb.WindowsForRequest(pipeline=p, start_us=a, end_us=b),
                                refs, ints, ints),
        "Run": run_requests,
        "StartRun": run_requests,
        "Start": st.builds(lambda p, j, m: pb.StartRequest(pipeline=p, job=j, spark_master=m), refs, names, text),
        "Stop": st.builds(lambda j, d, t: with_timeout(pb.StopRequest(job=j, drain=d), t), names | st.just("fz"),
                          st.booleans(), opt(floats)),
        "Restore": st.builds(lambda j, w, r: pb.RestoreRequest(job=j, window=w, reset_state=r), names, ints,
                             st.booleans()),
        "GetJob": job_requests,
        "ListCheckpoints": job_requests,
        "ListCycles": st.builds(lambda j, n, b: pb.ListCyclesRequest(job=j, limit=n, before=b) if b is not None
                                else pb.ListCyclesRequest(job=j, limit=n), names | st.just("fz"),
                                st.integers(-(2**31), 2**31 - 1), opt(ints)),
        "ListTransitions": job_requests,
        "ListSupersteps": st.builds(lambda j, w: pb.ListSuperstepsRequest(job=j) if w is None
                                    else pb.ListSuperstepsRequest(job=j, window=w), names | st.just("fz"), opt(ints)),
        "GetPlan": st.builds(lambda j, v: pb.GetPlanRequest(job=j, plan_version=v), names | st.just("fz"), text),
        "ListJobs": st.just(pb.ListJobsRequest()),
        "ListWorkers": st.just(pb.ListWorkersRequest()),
        "Watch": st.builds(lambda j, t: with_timeout(pb.WatchRequest(job=j), t), names | st.just("fz"),
                           opt(floats.filter(lambda f: not (0 < f < math.inf)) | st.floats(0, 1))),
        "ReadSink": st.builds(lambda j, k: pb.ReadSinkRequest(job=j, sink=k), names | st.just("fz"), names),
        "ReadState": st.builds(read_state_request, names | st.just("fz"), names | st.just(""), opt(ints),
                               names | st.just("")),
    }
    assert set(requests) == set(pb.DESCRIPTOR.services_by_name["Controller"].methods_by_name)
    seen: dict[str, set[grpc.StatusCode]] = {}

    def fuzz(method: str) -> None:
        @settings(max_examples=200, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(req=requests[method], metadata=st.sampled_from([GOOD, GOOD, GOOD, (), WRONG]))
        def one(req, metadata):
            code, msg = _call(stub, method, req, metadata=metadata, timeout=30)
            assert code in EXPECTED, (method, req, code, msg)
            assert code == grpc.StatusCode.OK or msg, (method, code)
            if metadata != GOOD:
                assert code == grpc.StatusCode.UNAUTHENTICATED
            seen.setdefault(method, set()).add(code)

        one()

    t0 = time.monotonic()
    for method in requests:
        fuzz(method)
    assert time.monotonic() - t0 < 150
    assert set(seen) == set(requests)  # every client RPC was tried, with and without the token
    assert all(grpc.StatusCode.UNAUTHENTICATED in codes for codes in seen.values())

    # the controller is up and answers
    assert ctl.proc is not None and ctl.proc.poll() is None
    health = health_pb2_grpc.HealthStub(env["channel"])
    assert health.Check(health_pb2.HealthCheckRequest(service="lockgate.v1.Controller"), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    jobs = {j.name: j for j in env["client"].list_jobs()}
    assert jobs["fz"].state == "FINISHED" and jobs["fz"].last_window == env["srv"].FIRST
    # and its catalog is sound: SQLite's own check, and every job row parses
    db = env["home"] / "catalog.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    cat = Catalog(f"sqlite:///{db}")
    try:
        for rec in cat.list_jobs():
            assert rec.name and re.fullmatch(r"[A-Z]+", rec.state.value)
            assert all(t.to_state for t in cat.transitions(rec.name))
    finally:
        cat.close()


def test_names_with_control_or_format_characters_are_refused_and_labels_travel(env):
    stub, client = env["stub"], env["client"]
    for job in ("nel\x85job", "csi\x9bjob", "bidi\u202ejob", "zw\u200bjob", "line\u2028job"):
        code, msg = _call(stub, "Submit", pb.SubmitRequest(pipeline=env["ref"], job=job))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "control or format character U+" in msg, (job, msg)
        code, msg = _call(stub, "ReadSink", pb.ReadSinkRequest(job="fz", sink=job))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (job, msg)
    assert not any("\x85" in p.name or "\x9b" in p.name for p in env["home"].rglob("*"))
    assert "\x85" not in env["ctl"].log_text()
    code, msg = _call(stub, "Submit", pb.SubmitRequest(pipeline=env["ref"], job="fz", labels={"who": "a\x85b"}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "U+0085" in msg
    info = client.submit(env["ref"], "fz", labels={"airflow.dag_id": "d1", "airflow.task_id": "t1"})
    assert info.labels == {"airflow.dag_id": "d1", "airflow.task_id": "t1"}
    assert client.get_job("fz").labels == info.labels
    assert any(j.labels == info.labels for j in client.list_jobs() if j.name == "fz")


def test_a_pipeline_that_exits_or_aborts_at_import_is_a_load_error_and_costs_no_worker(env):
    srv, client, pipes = env["srv"], env["client"], env["pipes"]
    for name, how in (("exits", "exited with code 7"), ("aborts", "SIGABRT")):
        ref = f"{pipes / name}.py:pipeline"
        with pytest.raises(PipelineLoadError, match=rf"{name}\.py.*{how}.*must not exit or abort the process"):
            client.compile(ref)
    ref = f"{pipes / 'exits'}.py:pipeline"
    with pytest.raises(PipelineLoadError, match="exited with code 7"):
        client.start(ref, job="exits_at_import")
    transitions = len(client.list_transitions("exits_at_import")) if any(
        j.name == "exits_at_import" for j in client.list_jobs()) else 0
    time.sleep(3)  # a continuous job that restarted would record RECOVERING/RUNNING here
    after = len(client.list_transitions("exits_at_import")) if any(
        j.name == "exits_at_import" for j in client.list_jobs()) else 0
    assert after == transitions
    srv.wait_for(lambda: any(w["state"] == "IDLE" for w in client.list_workers()), 120, "a standby in the lost one's place")
    assert client.compile(env["ref"]).plan_version
