#!/usr/bin/env bash
# Idempotent set-up of a Lockgate checkout: $REPO/.venv with lockgate[airflow,dev,lineage] installed
# editable, Debian's chromium for the browser tests and Debian's prometheus for the metrics tests. Needs Python 3.11 (python3, or $PYTHON) and Java 17+. Re-running is fast: pip runs
# only when pyproject.toml changed (stamp file), the pyspark check below always runs (<1 s).
#
# The pyspark-client trap: apache-airflow-providers-apache-spark requires pyspark-client,
# whose files overwrite ~100 of pyspark's own (Python UDFs then fail in the JVM). We detect
# it by checking pyspark's installed files against the hashes in its RECORD and reinstall
# pyspark (--no-deps --force-reinstall) when they differ. Never `pip uninstall
# pyspark-client`: that deletes the files the two packages share.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.lockgate-setup-stamp"
LOG="$VENV/setup.log"
cd "$REPO"
JAVA_FIX="install OpenJDK 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"

say() { echo "setup: $*"; }
die() { echo "setup: ERROR: $*" >&2; exit 1; }
pip_q() { "$PY" -m pip --disable-pip-version-check --no-input -q "$@" >>"$LOG" 2>&1 || { tail -n 40 "$LOG" >&2; die "pip $* failed (log: $LOG)"; }; }

# 1. Java 17+ (Spark's driver JVM).
if [ -n "${JAVA_HOME:-}" ]; then JAVA="$JAVA_HOME/bin/java"; else JAVA="$(command -v java || true)"; fi
[ -n "$JAVA" ] && [ -x "$JAVA" ] || die "Java 17+ is needed by Spark and was not found${JAVA_HOME:+ (JAVA_HOME=$JAVA_HOME has no bin/java)}. Fix: $JAVA_FIX."
jver="$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)"
jmajor="${jver%%[._+-]*}"
[ "$jmajor" = 1 ] && jmajor="$(echo "$jver" | cut -d. -f2)"
{ [[ "$jmajor" =~ ^[0-9]+$ ]] && [ "$jmajor" -ge 17 ]; } || die "Spark needs Java 17+, found '${jver:-unknown}' at $JAVA. Fix: $JAVA_FIX."
say "java $jver ($JAVA)"

# 2. The venv.
if [ ! -x "$PY" ]; then
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11 or set PYTHON=/path/to/python3.11."
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
        || die "Lockgate needs Python 3.11, $PYTHON is $("$PYTHON" -V 2>&1). Set PYTHON=/path/to/python3.11."
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV" || { rm -rf "$VENV"; die "cannot create a venv (on Debian: apt-get install python3-venv)."; }
fi

# 3. lockgate[airflow,dev,lineage], editable: only when pyproject.toml changed since the last success.
want="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
    rm -f "$STAMP"
    : >"$LOG"
    say "installing lockgate[airflow,dev,lineage] into $VENV (a few minutes on a fresh machine; log: $LOG)"
    pip_q install -e ".[airflow,dev,lineage]"
fi
# an editable install made before a package existed leaves it unimportable: redo it
if ! "$PY" -c 'import lockgate, lockgate_provider as p; p.get_provider_info()' >/dev/null 2>&1; then
    say "re-linking the editable install of lockgate"
    pip_q install --no-deps -e .
fi

# 4. Repair pyspark when pyspark-client (or anything else) overwrote its files.
PYSPARK_VERSION="$("$PY" - "$REPO/pyproject.toml" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print(next(d.split("==", 1)[1].strip() for d in deps if re.match(r"pyspark\s*==", d)))
PY
)"
check_pyspark() {
    "$PY" -I - "$PYSPARK_VERSION" <<'PY'
import base64, hashlib, os, sys
from importlib import metadata

want = sys.argv[1]
try:
    dist = metadata.distribution("pyspark")
except metadata.PackageNotFoundError:
    sys.exit("pyspark is not installed")
if dist.version != want:
    sys.exit(f"pyspark {dist.version} is installed, pyproject.toml pins {want}")
bad = []
for f in dist.files or []:
    path = f.locate()
    if f.hash is None or f.suffix == ".jar":  # pyspark-client ships no jars: existence is enough
        if f.suffix == ".jar" and not os.path.exists(path):
            bad.append(str(f))
        continue
    try:
        data = open(path, "rb").read()
    except OSError:
        bad.append(str(f))
        continue
    digest = base64.urlsafe_b64encode(hashlib.new(f.hash.mode, data).digest()).rstrip(b"=").decode()
    if digest != f.hash.value:
        bad.append(str(f))
if bad:
    sys.exit(f"{len(bad)} pyspark {want} files are missing or overwritten (e.g. {bad[0]})")
PY
}
if ! problem="$(check_pyspark 2>&1)"; then
    say "repairing pyspark==$PYSPARK_VERSION: $problem"
    pip_q install --no-deps --force-reinstall "pyspark==$PYSPARK_VERSION"
    problem="$(check_pyspark 2>&1)" || die "pyspark is still damaged after reinstalling: $problem"
fi

# 5. Chromium for the UI plugin's browser tests: Debian's package (nothing downloads a browser at
#    run time). Installed here when missing and this runs as root; otherwise say what to do.
if [ -n "${LOCKGATE_CHROMIUM:-}" ]; then
    [ -x "$LOCKGATE_CHROMIUM" ] || die "LOCKGATE_CHROMIUM=$LOCKGATE_CHROMIUM is not an executable"
elif ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's chromium (the UI plugin's browser tests drive it)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >>"$LOG" 2>&1 \
            || { tail -n 20 "$LOG" >&2; die "apt-get install chromium failed (log: $LOG)"; }
    else
        say "WARNING: chromium is not installed and this is not root: the browser tests will fail." \
            "Fix: sudo apt-get install chromium (Debian/Ubuntu), or set LOCKGATE_CHROMIUM to a Chromium binary"
    fi
fi

# 6. Prometheus (the server and promtool) for the metrics tests: Debian's package, as chromium above. The
#    tests that need it say why they skip when it is missing.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's prometheus (the metrics tests scrape a controller with it; promtool checks the rules)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; } >>"$LOG" 2>&1 \
            || { tail -n 20 "$LOG" >&2; die "apt-get install prometheus failed (log: $LOG)"; }
    else
        say "WARNING: prometheus is not installed and this is not root: the metrics tests that scrape with it skip." \
            "Fix: sudo apt-get install prometheus (Debian/Ubuntu)"
    fi
fi

echo "$want" >"$STAMP"
say "ready: $VENV (pyspark $PYSPARK_VERSION verified)"
