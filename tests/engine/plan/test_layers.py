"""The plan layer imports nothing from the runtime and nothing from Spark: a fresh
interpreter that imports every plan module has loaded neither."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import lockgate as lg
from lockgate.plan.compile import compile_pipeline

CODE = """
import json, sys
import lockgate.plan.compile, lockgate.plan.physical, lockgate.plan.explain, lockgate.plan.logical
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')
                        or m == 'lockgate.runtime' or m.startswith('lockgate.runtime.'))))
"""


def test_plan_modules_load_neither_pyspark_nor_the_runtime():
    out = subprocess.run([sys.executable, "-c", CODE], check=True, capture_output=True, text=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_the_old_call_shape_names_the_spark_entry_point():
    """``lockgate.plan.compile.compile_pipeline`` takes a SchemaInference: handed something
    else (a SparkSession, as before), it says which function compiles with Spark."""
    with pytest.raises(TypeError, match=r"lockgate\.runtime\.compiler\.compile_pipeline\(pipeline, spark\)"):
        compile_pipeline(lg.Pipeline("p"), object())  # type: ignore[arg-type]
