"""Integer nanoseconds: the one rounding rule for figures derived from them.

All times are integer ns. Averages, medians and mean lags are not, so every producer of such a figure
(aggregations, the summary, per-rank figures, reports) rounds it here to the nearest ns, ties to even
(Python's ``round`` and numpy's ``rint``; the Kineto importer rounds sub-ns µs decimals the same way).
Missing stays missing (None / NULL), never 0.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd


def round_ns(value: float | Decimal | Fraction | np.integer | np.floating | None) -> int | None:
    """``value`` ns as the nearest int (ties to even); None for None or NaN.

    Python's ``round`` is exact for ints (past float64's exact range too), Decimal and Fraction, and gives
    a Python int for numpy numbers, so the result always goes into JSON and SQLite as an integer."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value)


def round_ns_column(values: pd.Series) -> pd.Series:
    """A column of ns figures as nullable ``Int64``, each rounded like :func:`round_ns`."""
    if values.dtype.kind in "iu":
        return values.astype("Int64")
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    return pd.Series(pd.array(np.rint(numbers), dtype="Float64"), index=values.index).astype("Int64")
