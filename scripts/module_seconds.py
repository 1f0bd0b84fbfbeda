"""Write ``tests/module_seconds.json`` (each test module's seconds in one run of the test command)
from that run's JUnit XML, so the next runs hand the longest modules out first.

    scripts/test.sh --junitxml=/tmp/junit.xml && python scripts/module_seconds.py /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "module_seconds.json"


def module_seconds(junit_xml: Path) -> dict[str, float]:
    """Seconds per test module (``tests/...py``), summed over its test cases' set-up, call and teardown."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        # classname is the module's dotted path, then the test class's name if there is one
        path = "/".join(p for p in case.get("classname", "").split(".") if not p[:1].isupper()) + ".py"
        seconds[path] += float(case.get("time") or 0)
    return {m: round(s, 1) for m, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    table = module_seconds(Path(argv[0]))
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{OUT.name}: {len(table)} modules, {sum(table.values()) / 60:.1f} minutes of tests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
