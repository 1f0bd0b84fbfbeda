"""Security of the controller: the loopback rule, the bearer token (a missing or wrong one is
refused on every call and nothing changes), TLS, and the health service."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lockgate.checkpoint.catalog import Catalog
from lockgate.server.errors import AuthenticationError, ControllerUnavailableError
from lockgate.server.generated import lockgate_controller_pb2 as pb
from lockgate.server.generated import lockgate_controller_pb2_grpc as pb_grpc
from lockgate.server.generated import lockgate_worker_pb2 as wpb
from lockgate.server.generated import lockgate_worker_pb2_grpc as wpb_grpc

TOKEN = "s3cret-token-for-tests"

# every RPC, with a request that would change something if it were let through
CONTROLLER_CALLS = [
    ("Compile", pb.CompileRequest(pipeline="nowhere.py:pipeline")),
    ("Submit", pb.SubmitRequest(pipeline="nowhere.py:pipeline", job="existing")),
    ("WindowsFor", pb.WindowsForRequest(pipeline="nowhere.py:pipeline", start_us=0, end_us=10)),
    ("StartRun", pb.RunRequest(pipeline="nowhere.py:pipeline", job="existing", first=0, last=1)),
    ("Start", pb.StartRequest(pipeline="nowhere.py:pipeline", job="existing")),
    ("Stop", pb.StopRequest(job="existing", drain=False)),
    ("Restore", pb.RestoreRequest(job="existing", window=0)),
    ("GetJob", pb.JobRequest(job="existing")),
    ("ListJobs", pb.ListJobsRequest()),
    ("ListCheckpoints", pb.JobRequest(job="existing")),
    ("ListCycles", pb.ListCyclesRequest(job="existing")),
    ("ListTransitions", pb.JobRequest(job="existing")),
    ("GetPlan", pb.GetPlanRequest(job="existing")),
    ("ListWorkers", pb.ListWorkersRequest()),
]
STREAM_CALLS = [
    ("Run", pb.RunRequest(pipeline="nowhere.py:pipeline", job="existing", first=0, last=1)),
    ("Watch", pb.WatchRequest(job="existing", timeout_s=1)),
    ("ReadSink", pb.ReadSinkRequest(job="existing", sink="x")),
]
WORKER_CALLS = [
    ("Heartbeat", wpb.HeartbeatRequest(worker_id="w1", generation=1)),
    ("CycleDone", wpb.CycleDoneRequest(worker_id="w1", generation=1, request_id=1, result_json="{}")),
    ("CycleFailed", wpb.CycleFailedRequest(worker_id="w1", generation=1, request_id=1)),
    ("CompileDone", wpb.CompileDoneRequest(worker_id="w1", generation=1, request_id=1)),
]


def _code(fn, *args, **kwargs) -> grpc.StatusCode:
    try:
        result = fn(*args, **kwargs)
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def _snapshot(catalog_url: str) -> list[tuple]:
    cat = Catalog(catalog_url)
    try:
        return [(j.name, j.state.value, j.generation, j.pipeline_ref, len(cat.transitions(j.name)))
                for j in cat.list_jobs()]
    finally:
        cat.close()


def test_no_token_means_loopback_only(tmp_path):
    for host in ("0.0.0.0", "10.1.2.3", "::"):
        proc = subprocess.run(
            [sys.executable, "-m", "lockgate.cli.main", "server", "--home", str(tmp_path / "h"), "--host", host,
             "--port", "0"],
            capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert proc.returncode == 2, proc.stderr
        assert f"refusing to bind {host}" in proc.stderr and "loopback" in proc.stderr, proc.stderr


@pytest.fixture
def short_root():
    """A short folder for the controller's home: its worker socket lives under the home, and a Unix
    socket path has at most 107 bytes (pytest's own tmp_path can be longer on CI)."""
    root = Path(tempfile.mkdtemp(prefix="lg-auth-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_wrong_or_missing_token_is_refused_and_nothing_changes(tmp_path, short_root, make_controller):
    root = short_root
    home = root / "home"
    url = f"sqlite:///{home / 'catalog.db'}"
    home.mkdir(parents=True)
    cat = Catalog(url)
    cat.ensure_job("existing", "pipe.py:pipeline")  # a job the refused calls would change
    cat.close()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    ctl = make_controller("auth", root=root,
                          args=("--standby-workers", "0", "--token-file", str(token_file))).start()
    before = _snapshot(url)

    channel = grpc.insecure_channel(f"127.0.0.1:{ctl.port}")
    stub = pb_grpc.ControllerStub(channel)
    # the workers' service is not on the client-facing port at all, only on the workers' own server
    wrong_side = wpb_grpc.WorkerControlStub(channel)
    for name, req in WORKER_CALLS:
        assert _code(getattr(wrong_side, name), req, metadata=(("authorization", f"Bearer {TOKEN}"),),
                     timeout=30) == grpc.StatusCode.UNIMPLEMENTED, name
    assert ctl.worker_address.startswith("unix:") and ctl.worker_address.endswith("/run/controller.sock")
    assert (home / "run").stat().st_mode & 0o777 == 0o700  # the socket's folder: this user's processes only
    worker_channel = grpc.insecure_channel(ctl.worker_address)
    wstub = wpb_grpc.WorkerControlStub(worker_channel)
    for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)):
        for name, req in CONTROLLER_CALLS + STREAM_CALLS:
            assert _code(getattr(stub, name), req, metadata=metadata, timeout=30) == grpc.StatusCode.UNAUTHENTICATED, name
        for name, req in WORKER_CALLS:
            assert _code(getattr(wstub, name), req, metadata=metadata, timeout=30) == grpc.StatusCode.UNAUTHENTICATED, name
        hello = wpb.WorkerHello(worker_id="w1", pid=1)
        assert _code(wstub.Connect, hello, metadata=metadata, timeout=30) == grpc.StatusCode.UNAUTHENTICATED
    worker_channel.close()

    # the client raises AuthenticationError, naming the problem
    for token in (None, "wrong"):
        client = ctl.client(token=token or "")
        with pytest.raises(AuthenticationError, match="bearer token"):
            client.list_jobs()
        with pytest.raises(AuthenticationError):
            client.stop("existing", drain=False)
        client.close()

    # nothing changed: the job, its state, generation and transitions; no worker was started
    assert _snapshot(url) == before
    assert not list((home / "logs" / "workers").glob("*.log")) if (home / "logs" / "workers").exists() else True
    assert "unauthenticated" in ctl.log_text()

    # health needs no token (probes cannot send one); everything else works with it
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "lockgate.v1.Controller"):
        resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    good = ctl.client(token=TOKEN)
    assert [j.name for j in good.list_jobs()] == ["existing"]
    assert good.get_job("existing").state == "CREATED"
    assert good.list_workers() == []
    good.close()
    channel.close()


@pytest.fixture
def certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=lockgate-test",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.mark.slow
def test_tls_with_token_and_a_worker_over_tls(tmp_path, make_controller, certificate, srv):
    cert, key = certificate
    ctl = make_controller("tls", token=TOKEN, args=("--standby-workers", "0", "--tls-cert", str(cert),
                                                     "--tls-key", str(key))).start()
    assert "grpcs://127.0.0.1" in ctl.log_text()
    import lockgate

    secure = lockgate.connect(f"grpcs://127.0.0.1:{ctl.port}", token=TOKEN, tls_ca=str(cert))
    assert secure.list_jobs() == []

    # plaintext against a TLS server, or TLS without trusting the certificate: cannot connect
    for bad in (lockgate.connect(f"grpc://127.0.0.1:{ctl.port}", token=TOKEN, timeout=10),
                lockgate.connect(f"grpcs://127.0.0.1:{ctl.port}", token=TOKEN, timeout=10)):
        with pytest.raises(ControllerUnavailableError):
            bad.list_jobs()
        bad.close()
    # TLS with the wrong token
    wrong = lockgate.connect(f"grpcs://127.0.0.1:{ctl.port}", token="nope", tls_ca=str(cert))
    with pytest.raises(AuthenticationError):
        wrong.list_jobs()
    wrong.close()

    # a worker connects back over TLS with the token (a compile runs on it)
    ref, _ = srv.write_pipeline(tmp_path / "pipe", "tls_demo", 2000)
    res = secure.compile(ref)
    assert res.pipeline == "tls_demo" and len(res.plan_version) == 16
    assert "auction_windows" in res.explain
    assert [w["state"] for w in secure.list_workers()] == ["IDLE"]
    secure.close()
