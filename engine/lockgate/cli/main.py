"""The ``lockgate`` command.

    lockgate compile  PIPELINE
    lockgate explain  PIPELINE [--json]
    lockgate run      PIPELINE (--from T --to T | --from-window N --to-window N | --until-caught-up)
    lockgate jobs
    lockgate checkpoints JOB
    lockgate restore  JOB --window W [--reset-state]

PIPELINE is ``path/to/file.py:attr`` or ``package.module:attr``. Every command works on
the embedded default (``--controller embedded``) or against a controller
(``--controller grpc://host:port``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from datetime import UTC, datetime
from typing import Any

from ..errors import LockgateError


def _time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time like 2026-01-01T10:00:00") from err
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lockgate", description="Dataflow pipelines on Spark in checkpointed window cycles."
    )
    p.add_argument("--controller", default=os.environ.get("LOCKGATE_CONTROLLER", "embedded"),
                   help="'embedded' (default) or grpc://host:port of a lockgate server")
    p.add_argument("--home", default=None, help="Lockgate's folder (default $LOCKGATE_HOME or ~/.lockgate)")
    p.add_argument("--catalog", default=None, help="catalog URL (default SQLite under the home)")
    p.add_argument("--snapshots", default=None, help="snapshot store URI (default <home>/snapshots)")
    p.add_argument("--spark-master", default=None, help="local[2] (default), spark://host:7077 or sc://host:15002")
    p.add_argument("--token", default=os.environ.get("LOCKGATE_TOKEN"), help="bearer token of the controller")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logs (-vv: debug)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("compile", help="compile a pipeline and register nothing; print its summary")
    c.add_argument("pipeline")
    e = sub.add_parser("explain", help="print the logical and physical plans")
    e.add_argument("pipeline")
    r = sub.add_parser("run", help="run a range of cycle windows, in order, with a checkpoint per window")
    r.add_argument("pipeline")
    r.add_argument("--job", default=None, help="job name (default: the pipeline's name)")
    r.add_argument("--from", dest="start", type=_time, help="first instant to process (ISO time)")
    r.add_argument("--to", dest="end", type=_time, help="end of the range, exclusive (ISO time)")
    r.add_argument("--from-window", type=int, default=None)
    r.add_argument("--to-window", type=int, default=None, help="last window, inclusive")
    r.add_argument("--until-caught-up", action="store_true", help="run every window the sources hold data for")
    r.add_argument("--reset-state", action="store_true", help="continue with empty keyed state")
    r.add_argument("--no-progress", action="store_true")
    sub.add_parser("jobs", help="list jobs")
    k = sub.add_parser("checkpoints", help="list a job's checkpoints")
    k.add_argument("job")
    s = sub.add_parser("restore", help="roll a job back to a window's checkpoint, on purpose")
    s.add_argument("job")
    s.add_argument("--window", type=int, required=True)
    s.add_argument("--reset-state", action="store_true", help="also drop keyed state (restart without state)")
    from ..server.cli import add_server_parser

    add_server_parser(sub)
    return p


def _client(args: argparse.Namespace) -> Any:
    import lockgate

    if args.controller == "embedded":
        opts = {k: v for k, v in {
            "home": args.home, "catalog_url": args.catalog, "snapshots": args.snapshots,
            "spark_master": args.spark_master,
        }.items() if v}
        return lockgate.connect("embedded", **opts)
    opts = {"token": args.token} if args.token else {}
    return lockgate.connect(args.controller, **opts)


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def _run(args: argparse.Namespace, client: Any) -> int:
    from .progress import Progress

    first, last = args.from_window, args.to_window
    if args.start or args.end:
        if not (args.start and args.end):
            raise LockgateError("--from and --to go together (or use --until-caught-up)")
        first, last = client.windows_for(args.pipeline, args.start, args.end)
    if last is None and not args.until_caught_up:
        raise LockgateError("say which windows to run: --from T --to T, --to-window N, or --until-caught-up")
    total = (last - first + 1) if (first is not None and last is not None) else None
    progress = Progress(total, enabled=not args.no_progress and not args.json)
    try:
        res = client.run(args.pipeline, job=args.job, first=first, last=last,
                         until_caught_up=args.until_caught_up, reset_state=args.reset_state, on_event=progress)
    finally:
        progress.close()
    rate = res.rows_in / res.elapsed_s if res.elapsed_s else 0
    text = (
        f"job {res.job}: {res.state}; windows {res.first_window}..{res.last_window}: "
        f"{res.windows_run} run, {res.windows_skipped} already complete; "
        f"{res.rows_in:,} rows in, {res.rows_out:,} rows out, {res.late_rows:,} late; "
        f"{res.elapsed_s:.1f}s ({rate:,.0f} rows/s)"
    )
    _out(args, res.to_dict(), text)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from .. import logs

    logs.configure({0: "WARNING", 1: "INFO"}.get(args.verbose, "DEBUG"))
    try:
        if args.command == "server":
            from ..server.cli import run_server

            return run_server(args)
        client = _client(args)
        try:
            return _dispatch(args, client)
        finally:
            client.close()
    except LockgateError as err:
        print(f"lockgate: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lockgate: interrupted; the run resumes from its last complete window", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace, client: Any) -> int:
    if args.command == "compile":
        res = client.compile(args.pipeline)
        d = res.to_dict()
        d.pop("explain")
        _out(args, d, (
            f"pipeline {res.pipeline}: plan version {res.plan_version}\n"
            f"  operators: {', '.join(res.operators)}\n"
            f"  stateful:  {', '.join(res.stateful_operators) or '(none)'}\n"
            f"  sinks:     {', '.join(res.sinks)}\n"
            f"  cycle window: {res.cycle_window_s:g}s"
        ))
        return 0
    if args.command == "explain":
        if args.json:
            from ..api.loader import load_pipeline
            from ..plan import explain_json
            from ..runtime.compiler import compile_pipeline

            print(explain_json(compile_pipeline(load_pipeline(args.pipeline))))
        else:
            print(client.compile(args.pipeline).explain)
        return 0
    if args.command == "run":
        return _run(args, client)
    if args.command == "jobs":
        jobs = client.list_jobs()
        rows = [[j.name, j.state, j.last_window, j.plan_version, j.pipeline_ref, (j.last_error or "")[:60]]
                for j in jobs]
        _out(args, [j.to_dict() for j in jobs],
             _table(rows, ["JOB", "STATE", "LAST WINDOW", "PLAN", "PIPELINE", "ERROR"]) if jobs else "no jobs yet")
        return 0
    if args.command == "checkpoints":
        cps = client.list_checkpoints(args.job)
        rows = [[c.window, c.window_start.isoformat(), c.window_end.isoformat(), c.rows_in, c.rows_out,
                 c.plan_version, c.created.strftime("%Y-%m-%d %H:%M:%S")] for c in cps]
        _out(args, [c.to_dict() for c in cps],
             _table(rows, ["WINDOW", "START", "END", "ROWS IN", "ROWS OUT", "PLAN", "CREATED"])
             if cps else f"job {args.job} has no checkpoint yet")
        return 0
    if args.command == "restore":
        info = client.restore(args.job, args.window, reset_state=args.reset_state)
        _out(args, info.to_dict(),
             f"job {info.name} restored to window {args.window}; state {info.state}; "
             f"the next run resumes at window {args.window + 1}")
        return 0
    raise LockgateError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
