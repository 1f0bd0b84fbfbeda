"""The ``lockgate`` command.

    lockgate compile  PIPELINE
    lockgate explain  PIPELINE [--json]
    lockgate run      PIPELINE (--from T --to T | --from-window N --to-window N | --until-caught-up)
                      [--catchup auto|off|N]
    lockgate follow   JOB
    lockgate jobs
    lockgate checkpoints JOB
    lockgate cycles   JOB [--window W] [--limit N]
    lockgate state    JOB [--operator OP] [--window W] [--table T] [--limit N]
    lockgate restore  JOB --window W [--reset-state]

PIPELINE is ``path/to/file.py:attr`` or ``package.module:attr``. Every command works on
the embedded default (``--controller embedded``) or against a controller
(``--controller grpc://host:port``). A run followed on a controller that goes away is
followed again once a controller answers (see :mod:`lockgate.cli.follow`).

Errors print one line: ``lockgate: error: ...``, status 2 for Lockgate's errors, 1 for any
other (``-v`` prints its traceback). Output into a closed pipe (``| head -1``) ends the
command quietly with status 141, as SIGPIPE ends standard tools.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
import traceback
import warnings
from datetime import UTC, datetime
from typing import Any

from ..control.catchup import check_catchup
from ..errors import InvalidArgumentError, LockgateError
from .cycles import add_cycles_parser, cycles_report
from .tables import render_table, terminal_width

#: exit status of a command whose output pipe was closed (128 + SIGPIPE, as a shell reports it)
EXIT_PIPE_CLOSED = 141
DEFAULT_REATTACH_S = float(os.environ.get("LOCKGATE_REATTACH_TIMEOUT") or 300)


class _StdoutClosed(Exception):
    """stdout is a pipe whose reader went away (``lockgate ... | head -1``)."""


def _time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time like 2026-01-01T10:00:00") from err
    return t if t.tzinfo else t.replace(tzinfo=UTC)


PIPELINE_HELP = ("the pipeline: path/to/file.py:attr or package.module:attr, where attr is a lockgate.Pipeline "
                 "or a function returning one (on a controller, marked @lockgate.pipeline_factory)")
class _HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped to the terminal's width; an epilog (its examples) kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


RAW = _HelpFormatter


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lockgate", formatter_class=RAW,
        description="Run dataflow pipelines on Spark in windowed cycles: one round per cycle window, a checkpoint "
        "after each, exactly once into every sink. Commands work on the embedded engine (local Spark, a SQLite "
        "catalog under the home) or on a controller (--controller grpc://host:port).",
        epilog="examples:\n"
        "  lockgate explain examples/nexmark_demo.py:pipeline\n"
        "  lockgate run examples/nexmark_demo.py:pipeline --until-caught-up\n"
        "  lockgate checkpoints nexmark_demo\n"
        "  lockgate restore nexmark_demo --window 88361282\n\n"
        "'lockgate COMMAND --help' describes each command. Errors print one line, status 2.",
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

    c = sub.add_parser("compile", help="compile a pipeline and register nothing; print its summary",
                       formatter_class=RAW,
                       description="Compile a pipeline (Spark's analyzer checks every operator's columns and "
                       "types) and print its plan version, operators and sinks. Registers nothing.",
                       epilog="example:\n  lockgate compile examples/nexmark_demo.py:pipeline")
    c.add_argument("pipeline", help=PIPELINE_HELP)
    e = sub.add_parser("explain", help="print the logical and physical plans", formatter_class=RAW,
                       description="Print the logical plan (PipelineGraph: operators, edges, schemas), the "
                       "physical plan exactly as a round runs it (cycles, groups, chains) and the state layout "
                       "a checkpoint must fit.",
                       epilog="example:\n  lockgate explain examples/nexmark_demo.py:pipeline")
    e.add_argument("pipeline", help=PIPELINE_HELP)
    r = sub.add_parser(
        "run", help="run a range of cycle windows, in order, with a checkpoint per window", formatter_class=RAW,
        description="Run the cycle windows of a range, in order, one round per window, each committed to every "
        "sink and checkpointed; windows already committed are skipped, and a job that failed or was killed "
        "resumes after its last checkpoint. Give the range as instants (--from/--to), as window ids "
        "(--from-window/--to-window), or --until-caught-up. Window k of a pipeline is "
        "[origin + k*cycle_window, origin + (k+1)*cycle_window), origin 1970-01-01T00:00Z by default: "
        "'lockgate checkpoints JOB' shows each window's id and time range.",
        epilog="examples:\n"
        "  lockgate run examples/nexmark_demo.py:pipeline --until-caught-up\n"
        "  lockgate run pipelines/orders.py:pipeline --from 2026-01-01 --to 2026-01-02\n"
        "  lockgate run pipelines/orders.py:pipeline --from-window 81816 --to-window 81819 --job orders_test\n"
        "  lockgate --controller grpc://127.0.0.1:50051 run /srv/pipelines/bids.py:pipeline --until-caught-up",
    )
    r.add_argument("pipeline", help=PIPELINE_HELP)
    r.add_argument("--job", default=None, help="job name (default: the pipeline's name)")
    r.add_argument("--from", dest="start", type=_time, help="first instant to process (ISO time)")
    r.add_argument("--to", dest="end", type=_time, help="end of the range, exclusive (ISO time)")
    r.add_argument("--from-window", type=int, default=None, metavar="N",
                   help="first window id, inclusive (a whole number: window N starts at origin + N*cycle_window)")
    r.add_argument("--to-window", type=int, default=None, metavar="M", help="last window id, inclusive")
    r.add_argument("--until-caught-up", action="store_true", help="run every window the sources hold data for")
    r.add_argument("--reset-state", action="store_true", help="continue with empty keyed state")
    r.add_argument("--catchup", default=None, metavar="auto|off|N",
                   help="due windows one catch-up group may run in one go, each still committed on its own: "
                        "auto (adaptive), off (one window per round) or a number (default: $LOCKGATE_CATCHUP, "
                        "else auto)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines, only the summary")
    r.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="embedded runs: serve Prometheus metrics at http://--metrics-host:PORT/metrics while "
                   "the run lasts (a controller serves its own: lockgate server --metrics-port)")
    r.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics endpoint (default 127.0.0.1)")
    _reattach_flag(r)
    f = sub.add_parser("follow", help="follow a job under way until it rests (FINISHED, STOPPED or FAILED)",
                       formatter_class=RAW,
                       description="Follow a job that runs on a controller, with the same progress and summary "
                       "as the run that started it; Ctrl-C stops following and leaves the job running.",
                       epilog="example:\n  lockgate --controller grpc://127.0.0.1:50051 follow bids")
    f.add_argument("job", help="the job's name")
    f.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines, only the summary")
    _reattach_flag(f)
    sub.add_parser("jobs", help="list jobs", description="List every job: its state, last committed window, "
                   "plan version, pipeline and last error.")
    k = sub.add_parser("checkpoints", help="list a job's checkpoints", formatter_class=RAW,
                       description="List a job's complete checkpoints, oldest first: each window's id, time range, "
                       "rows in and out (summed over the sinks) and plan version; what 'lockgate restore' can go "
                       "back to.", epilog="example:\n  lockgate checkpoints nexmark_demo")
    k.add_argument("job", help="the job's name")
    add_cycles_parser(sub)
    st = sub.add_parser("state", help="a stateful operator's keyed state at a checkpoint, as a table",
                        formatter_class=RAW,
                        description="Print one stateful operator's keyed state at a checkpoint (the latest by "
                        "default), merged from the checkpoint's layers and read without Spark.",
                        epilog="example:\n  lockgate state nexmark_demo --operator bidder_totals --limit 5")
    st.add_argument("job", help="the job's name")
    st.add_argument("--operator", help="the stateful operator (may be left out when the job has one)")
    st.add_argument("--window", type=int, help="the checkpoint's window (default: the latest)")
    st.add_argument("--table", help="the operator's state table (a join keeps left and right)")
    st.add_argument("--limit", type=int, default=20, help="rows printed (default 20; 0: all; --json: all)")
    s = sub.add_parser("restore", help="roll a job back to a window's checkpoint, on purpose", formatter_class=RAW,
                       description="Roll a job back to the checkpoint of window W: later checkpoints are marked "
                       "rolled back and the sinks' output of later windows is retracted; the next run resumes "
                       "at W+1 and writes it again. Starts no Spark.",
                       epilog="examples:\n  lockgate restore nexmark_demo --window 88361282\n"
                       "  lockgate restore nexmark_demo --window 88361282 --reset-state")
    s.add_argument("job", help="the job's name")
    s.add_argument("--window", type=int, required=True, metavar="W", help="the window to go back to (its checkpoint "
                   "must exist: see 'lockgate checkpoints JOB')")
    s.add_argument("--reset-state", action="store_true", help="also drop keyed state (restart without state)")
    cycles = sub.choices["cycles"]
    cycles.formatter_class = RAW
    cycles.description = ("List a job's rounds, newest first: one row per attempt at a window, with its state, rows "
                          "in and out (summed over the sinks), late and invalid rows, and milliseconds; a graph "
                          "operator's supersteps under its round.")
    cycles.epilog = "example:\n  lockgate cycles nexmark_demo --limit 3"
    from ..server.cli import add_server_parser

    add_server_parser(sub)
    return p


def _reattach_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reattach-timeout", type=float, default=DEFAULT_REATTACH_S, metavar="SECONDS",
                   help="when the controller goes away mid-run, wait this long for one to answer again and "
                   "follow the job again (default 300, or $LOCKGATE_REATTACH_TIMEOUT)")


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
    """A table for stdout: fitted to the terminal, or plain and as wide as its content."""
    return render_table(rows, header, terminal_width(sys.stdout))


def _print(text: str) -> None:
    """Print to stdout; a closed pipe (the reader went away) raises _StdoutClosed."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError as err:
        raise _StdoutClosed from err


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    _print(json.dumps(data, indent=2, default=str) if args.json else text)


def _run(args: argparse.Namespace, client: Any) -> int:
    from ..server.client import RunDetachedError
    from .follow import Tally
    from .progress import Progress

    t0 = time.monotonic()
    first, last = args.from_window, args.to_window
    if args.start or args.end:
        if not (args.start and args.end):
            raise LockgateError("--from and --to go together (or use --until-caught-up)")
        first, last = client.windows_for(args.pipeline, args.start, args.end)
    if last is None and not args.until_caught_up:
        raise LockgateError("say which windows to run: --from T --to T, --to-window N, or --until-caught-up")
    if first is not None and last is not None and last < first:
        raise InvalidArgumentError(f"--to-window {last} is before --from-window {first}: nothing to run")
    if args.catchup is not None:
        check_catchup(args.catchup, "--catchup")
    _serve_metrics(args)
    total = (last - first + 1) if (first is not None and last is not None) else None
    progress = Progress(total, enabled=not args.no_progress and not args.json)
    tally = Tally(progress)
    try:
        try:
            res = client.run(args.pipeline, job=args.job, first=first, last=last,
                             until_caught_up=args.until_caught_up, reset_state=args.reset_state, on_event=tally,
                             catchup=args.catchup)
        except RunDetachedError as err:
            res = _reattach(args, err, first, last, tally, progress, t0)
    finally:
        progress.close()
    if res.first_window is not None and res.last_window is not None and res.last_window < res.first_window:
        return _nothing_to_run(args, client, res)
    rate = res.rows_in / res.elapsed_s if res.elapsed_s else 0
    text = (
        f"job {res.job}: {res.state}; windows {res.first_window}..{res.last_window}: "
        f"{res.windows_run} run, {res.windows_skipped} already complete; "
        f"{res.rows_in:,} rows in, {res.rows_out:,} rows out, {res.late_rows:,} late; "
        f"{res.elapsed_s:.1f}s ({rate:,.0f} rows/s)"
    )
    _out(args, res.to_dict(), text)
    return 0


def _serve_metrics(args: argparse.Namespace) -> None:
    """``run --metrics-port``: serve this process' metrics (a port that cannot be bound is said, not fatal)."""
    if getattr(args, "metrics_port", None) is None:
        return
    if args.controller != "embedded":
        print("lockgate run: --metrics-port serves embedded runs only; the controller serves its own "
              "(lockgate server --metrics-port)", file=sys.stderr)
        return
    from .. import metrics

    exporter = metrics.serve(args.metrics_port, args.metrics_host)
    if exporter.serving:
        print(f"lockgate run: Prometheus metrics at {exporter.url}", file=sys.stderr)
    else:
        print(f"lockgate run: no metrics endpoint ({exporter.error}); the run goes on", file=sys.stderr)


def _reattach(args: argparse.Namespace, err: Any, first: int | None, last: int | None, tally: Any,
              progress: Any, t0: float) -> Any:
    """The controller went away mid-run: wait for one, follow the job again, summarise the run."""
    from .follow import Follower, cause_of, detach_target

    target = detach_target(err, first, last)
    follower = Follower(args.controller, lambda: _client(args), args.reattach_timeout, tally, progress.note, t0=t0)
    try:
        info = follower.follow(target, cause=cause_of(err))
        return follower.summary(target, info)
    finally:
        follower.close()


def _nothing_to_run(args: argparse.Namespace, client: Any, res: Any) -> int:
    """A run whose range is empty: the job is caught up (or its sources hold nothing yet)."""
    done = client.get_job(res.job).last_window
    shown = "none yet" if done is None else str(done)
    if done is not None and done >= res.last_window:
        text = f"job '{res.job}' is caught up: nothing to run (last committed window {shown})"
    else:
        text = (f"job '{res.job}': nothing to run: its sources hold no complete window from window "
                f"{res.first_window} on (last committed window {shown})")
    _out(args, {**res.to_dict(), "nothing_to_run": True, "last_committed_window": done}, text)
    return 0


def _follow(args: argparse.Namespace, client: Any) -> int:
    from .follow import Follower, Tally, Target
    from .progress import Progress

    info = client.get_job(args.job)  # an unreachable controller: one line, at once
    progress = Progress(None, enabled=not args.no_progress and not args.json)
    follower = Follower(args.controller, lambda: _client(args), args.reattach_timeout, Tally(progress),
                        progress.note, client=client)
    try:
        info = follower.follow(Target(args.job), cause=None)
    finally:
        progress.close()
        follower.close()
    _out(args, info.to_dict(), f"job {info.name}: {info.state}; last complete window "
         f"{'none yet' if info.last_window is None else info.last_window}")
    return 0


def _state(args: argparse.Namespace, client: Any) -> int:
    table = client.read_state(args.job, args.operator, window=args.window, table=args.table)
    rows = table.to_pylist()
    if args.json:
        _out(args, rows, "")
        return 0
    shown = rows if args.limit <= 0 else rows[: args.limit]
    cells = [[_cell(r[c]) for c in table.column_names] for r in shown]
    more = f"\n({len(rows) - len(shown)} more rows; --limit 0 prints all)" if len(shown) < len(rows) else ""
    text = _table(cells, [c.upper() for c in table.column_names])
    _out(args, rows, f"{text}{more}\n{len(rows)} rows")
    return 0


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the ``lockgate`` command; returns its exit status."""
    # before gRPC is imported: grpcio's fork handlers can kill the child that PySpark forks (with a
    # preexec_fn) to start its JVM while a channel or server is live; nothing here uses gRPC across a fork
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    try:
        return _main(argv)
    except _StdoutClosed:
        # the reader of stdout went away: say nothing (as `... | head -1` expects); point
        # stdout at /dev/null so that the interpreter's last flush does not complain
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE_CLOSED


def _main(argv: list[str] | None) -> int:
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
    except _StdoutClosed:
        raise
    except LockgateError as err:
        detail = getattr(err, "detail", None)
        if args.verbose and detail:  # the full text Spark gave (JVM stack trace, Python traceback)
            print(detail, file=sys.stderr)
        print(f"lockgate: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.controller == "embedded" or args.command not in ("run", "follow"):
            print("lockgate: interrupted; a run resumes from its last complete window", file=sys.stderr)
        else:
            print(f"lockgate: interrupted; the job goes on at the controller {args.controller} (follow it with "
                  "`lockgate follow JOB`, stop it from Airflow or the client API)", file=sys.stderr)
        return 130
    except Exception as err:  # a bug or an unforeseen failure: one line, the traceback on -v
        if args.verbose:
            traceback.print_exc()
        first_line = (str(err).strip().splitlines() or [""])[0]
        hint = "" if args.verbose else " (run with -v for the traceback)"
        print(f"lockgate: error: {type(err).__name__}: {first_line}{hint}", file=sys.stderr)
        return 1


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

            _print(explain_json(compile_pipeline(load_pipeline(args.pipeline))))
        else:
            _print(client.compile(args.pipeline).explain)
        return 0
    if args.command == "run":
        return _run(args, client)
    if args.command == "follow":
        return _follow(args, client)
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
    if args.command == "cycles":
        data, text = cycles_report(args, client)
        _out(args, data, text)
        return 0
    if args.command == "state":
        return _state(args, client)
    if args.command == "restore":
        info = client.restore(args.job, args.window, reset_state=args.reset_state)
        _out(args, info.to_dict(),
             f"job {info.name} restored to window {args.window}; state {info.state}; "
             f"the next run resumes at window {args.window + 1}")
        return 0
    raise LockgateError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
