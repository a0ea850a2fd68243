"""Frame helpers the roofline's per-call passes share (MFU, nested costs): each distinct call modelled once."""

from __future__ import annotations

import numpy as np
import pandas as pd


def distinct_rows(frame: pd.DataFrame, columns: list[str]) -> tuple[np.ndarray, list[tuple]]:
    """Each row's code among the distinct value tuples of ``columns``, and those tuples (missing values as NaN):
    what ``MultiIndex.from_frame(...).factorize()`` gives, up to the order of the tuples, without building the
    tuple of every row (a categorical column is already coded; the codes are combined column by column)."""
    codes = np.zeros(len(frame), dtype=np.int64)
    per_column = []
    for col in columns:
        column = frame[col]
        if isinstance(column.dtype, pd.CategoricalDtype):
            own = column.cat.codes.to_numpy(np.int64)
            uniq = np.append(np.asarray(column.cat.categories, dtype=object), np.nan)  # code -1: the last
        else:
            own, found = pd.factorize(column.to_numpy(dtype=object), use_na_sentinel=False)
            uniq = np.asarray(found, dtype=object)
        per_column.append((own, uniq))
        codes = pd.factorize(codes * (len(uniq) + 1) + own + 1)[0].astype(np.int64)  # small: at most the rows
    first = np.unique(codes, return_index=True)[1]  # the first row of each code, codes 0..n-1
    tuples = list(zip(*(uniq[own[first]].tolist() for own, uniq in per_column)))
    return codes, tuples


def outermost(has: np.ndarray, ops: pd.DataFrame) -> np.ndarray:
    """The op calls where ``has`` holds and no enclosing call's does (``ops``: ``op_id``, ``parent_id``,
    ``depth``): an op with a model counts and the ops nested in it do not. Levels top down, one vectorized step per
    depth."""
    pos = pd.Index(ops["op_id"].to_numpy(np.int64)).get_indexer(ops["parent_id"].to_numpy(np.int64))
    covered = np.zeros(len(ops), dtype=bool)
    depth = ops["depth"].to_numpy(np.int64)
    for d in np.unique(depth):
        rows = np.flatnonzero((depth == d) & (pos >= 0))
        covered[rows] = covered[pos[rows]] | has[pos[rows]]
    return has & ~covered
