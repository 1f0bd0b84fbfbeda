"""Generate the Python code of the gRPC protocol from ``server/protos/*.proto``.

    python -m lockgate.server.codegen          # (re)write server/generated/
    python -m lockgate.server.codegen --check  # exit 1 when server/generated/ is stale

The output depends only on the .proto files and the grpcio-tools version (the one in the
dev extra); ``tests/engine/server/test_server_codegen.py`` fails when it is stale. Stale
means a different protocol: the version stamps protoc writes (``GRPC_GENERATED_VERSION``,
the protobuf runtime check) follow the installed grpcio-tools and are left out of the
comparison, so a newer patch release of the tools does not make a checkout stale.
protoc writes ``import x_pb2`` in the ``_grpc`` modules; it is rewritten to a relative
import so the modules live in the ``lockgate.server.generated`` package.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = HERE / "protos"
GENERATED = HERE / "generated"
INIT = '"""Code generated from ../protos/*.proto by `python -m lockgate.server.codegen`. Do not edit."""\n'

_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)
_STAMPS = (
    (re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.MULTILINE), "GRPC_GENERATED_VERSION = ''"),
    (re.compile(r"^# Protobuf Python Version: .*$", re.MULTILINE), "# Protobuf Python Version:"),
    (re.compile(r"(Domain\.PUBLIC,\n)\s*\d+,\n\s*\d+,\n\s*\d+,\n"), r"\1"),
)


def unstamped(text: str) -> str:
    """``text`` without the tools' version stamps: what a change of protocol changes."""
    for pattern, repl in _STAMPS:
        text = pattern.sub(repl, text)
    return text


def generate(out: Path) -> dict[str, str]:
    """Run protoc over every .proto into ``out``; return ``{file name: text}``."""
    import grpc_tools
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(p.name for p in PROTOS.glob("*.proto"))
    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(protos)}")
    files: dict[str, str] = {"__init__.py": INIT}
    for path in sorted(out.iterdir()):
        if path.suffix not in (".py", ".pyi") or path.name == "__init__.py":
            continue
        text = path.read_text()
        if path.name.endswith("_grpc.py"):
            text = _IMPORT.sub(r"from . import \1 as \2", text)
        files[path.name] = text
    return files


def current() -> dict[str, str]:
    """The generated files as they are in the package."""
    return {p.name: p.read_text() for p in sorted(GENERATED.iterdir()) if p.suffix in (".py", ".pyi")}


def stale() -> list[str]:
    """Names of generated files that differ from what the .proto files give (empty: up to date)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    have = current()
    return sorted(n for n in set(fresh) | set(have) if unstamped(fresh.get(n, "")) != unstamped(have.get(n, "")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lockgate.server.codegen", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only check; exit 1 when the generated code is stale")
    args = p.parse_args(argv)
    if args.check:
        names = stale()
        if names:
            print(f"stale generated code: {', '.join(names)}; run python -m lockgate.server.codegen", file=sys.stderr)
            return 1
        print("generated code is up to date")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp))
    GENERATED.mkdir(exist_ok=True)
    for old in GENERATED.iterdir():
        if old.suffix in (".py", ".pyi") and old.name not in files:
            old.unlink()
    for name, text in files.items():
        (GENERATED / name).write_text(text)
    print(f"wrote {', '.join(sorted(files))} to {GENERATED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
