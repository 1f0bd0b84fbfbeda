"""The Python code generated from the .proto files is reproducible and up to date."""

from __future__ import annotations

import subprocess
import sys

from lockgate.server import codegen


def test_generated_code_is_up_to_date():
    stale = codegen.stale()
    assert not stale, (
        f"server/generated/ is stale ({', '.join(stale)}): run `python -m lockgate.server.codegen` and commit the result"
    )


def test_codegen_check_command_and_imports():
    proc = subprocess.run([sys.executable, "-m", "lockgate.server.codegen", "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    from lockgate.server.generated import lockgate_controller_pb2_grpc, lockgate_worker_pb2_grpc

    assert hasattr(lockgate_controller_pb2_grpc, "ControllerStub")
    assert hasattr(lockgate_worker_pb2_grpc, "WorkerControlStub")


def test_a_changed_proto_makes_the_code_stale(tmp_path, monkeypatch):
    protos = tmp_path / "protos"
    protos.mkdir()
    for p in codegen.PROTOS.glob("*.proto"):
        text = p.read_text()
        if p.name == "lockgate_controller.proto":
            text = text.replace("message JobRequest {\n  string job = 1;\n}",
                                "message JobRequest {\n  string job = 1;\n  bool extra = 2;\n}")
        (protos / p.name).write_text(text)
    monkeypatch.setattr(codegen, "PROTOS", protos)
    assert "lockgate_controller_pb2.py" in codegen.stale()


def test_version_stamps_alone_do_not_make_the_code_stale(tmp_path, monkeypatch):
    generated = tmp_path / "generated"
    generated.mkdir()
    for name, text in codegen.current().items():
        text = text.replace("GRPC_GENERATED_VERSION = '", "GRPC_GENERATED_VERSION = '9.")
        text = text.replace("# Protobuf Python Version: ", "# Protobuf Python Version: 9.")
        text = text.replace("Domain.PUBLIC,\n    ", "Domain.PUBLIC,\n    99")
        (generated / name).write_text(text)
    assert codegen.current() != {p.name: p.read_text() for p in generated.iterdir()}
    monkeypatch.setattr(codegen, "GENERATED", generated)
    assert codegen.stale() == []
    worker = generated / "lockgate_worker_pb2_grpc.py"
    worker.write_text(worker.read_text().replace("class WorkerControlStub", "class WorkerStub"))
    assert codegen.stale() == ["lockgate_worker_pb2_grpc.py"]
