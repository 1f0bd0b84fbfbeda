"""pandas within the range pyproject.toml declares, a range PySpark supports fully: its own
check passes with no FutureWarning (PySpark 4.3 warns that it does not yet fully support
pandas >= 3, and Lockgate's runs go through PySpark's Arrow paths)."""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path

import pandas
import pyspark
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from pyspark.sql.pandas.utils import require_minimum_pandas_version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared(name: str) -> SpecifierSet:
    """The version range pyproject.toml's dependencies give ``name``."""
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    found = [d for d in deps if re.match(rf"{re.escape(name)}\s*[<>=!~]", d)]
    assert len(found) == 1, f"pyproject.toml declares {name} {len(found)} times: {found}"
    return SpecifierSet(found[0][len(name):].split(";")[0].strip())


def test_installed_pandas_is_in_the_declared_range() -> None:
    spec = declared("pandas")
    assert Version(pandas.__version__) in spec, f"pandas {pandas.__version__} is installed, pyproject.toml says {spec}"


def test_the_declared_range_is_one_pyspark_supports() -> None:
    spec = declared("pandas")
    assert pyspark.__version__.startswith("4.3")
    assert not spec.contains("3.0.0") and not spec.contains("3.1.0"), f"{spec} admits pandas 3"
    assert not spec.contains("2.1.4"), f"{spec} admits a pandas older than PySpark's minimum (2.2.0)"
    assert spec.contains("2.2.0") and spec.contains("2.3.3")


def test_pysparks_own_pandas_check_passes_without_a_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        require_minimum_pandas_version()
    said = [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, FutureWarning)]
    assert not said, said
