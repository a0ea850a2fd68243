"""The tail effect's launches grouped on integer codes give what pandas' groupby gives (the rule's former code)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlscope.experts.evidence import top_by
from dlscope.experts.rules.waves import _CONFIG, _launches


def _hit(rng: np.random.Generator, n: int) -> pd.DataFrame:
    names = pd.Categorical.from_codes(rng.integers(-1, 4, n), categories=["gemm_a", "gemm_b", "conv", "unused"])
    frame = pd.DataFrame({"name": names, "dur": rng.integers(1, 1000, n), "tail": rng.integers(1, 500, n)})
    for c in _CONFIG[1:]:
        frame[c] = rng.integers(1, 3, n)
    frame["slots"], frame["blocks"] = rng.integers(1, 9, n), rng.integers(1, 99, n)
    for c in ("waves", "last_wave_fill"):
        frame[c] = np.where(rng.random(n) < 0.3, np.nan, rng.random(n))
    frame["device"], frame["rank"] = rng.integers(0, 2, n), rng.integers(0, 2, n)
    frame["active_blocks_per_sm"] = rng.integers(1, 4, n)
    return frame


@pytest.mark.parametrize("seed", range(40))
def test_launches_match_pandas_groupby(seed):
    rng = np.random.default_rng(seed)
    hit = _hit(rng, int(rng.integers(1, 60)))
    expected = (hit.groupby(_CONFIG, sort=False)
                .agg(calls=("tail", "size"), tail_ns=("tail", "sum"), gpu_time_ns=("dur", "sum"),
                     slots=("slots", "first"), blocks=("blocks", "first"), waves=("waves", "first"),
                     last_wave_fill=("last_wave_fill", "first"), device=("device", "first"),
                     rank=("rank", "first"), active_blocks_per_sm=("active_blocks_per_sm", "first"))
                .reset_index())
    got = _launches(hit)
    pd.testing.assert_frame_equal(got.astype({"name": object}), expected.astype({"name": object}))
    pd.testing.assert_frame_equal(got.nlargest(3, "tail_ns").reset_index(drop=True).astype({"name": object}),
                                  expected.nlargest(3, "tail_ns").reset_index(drop=True).astype({"name": object}))


def test_launches_by_hand():
    hit = pd.DataFrame({"name": pd.Categorical(["b", "a", "b", None, "b"]), "dur": [10, 20, 30, 40, 50],
                        "tail": [1, 2, 3, 4, 5], **{c: [1, 1, 1, 1, 2] for c in _CONFIG[1:]},
                        "slots": [7, 8, 9, 10, 11], "blocks": [1, 2, 3, 4, 5],
                        "waves": [np.nan, 1.5, 2.5, 3.5, 4.5], "last_wave_fill": [0.1, 0.2, 0.3, 0.4, 0.5],
                        "device": [0, 0, 0, 0, 0], "rank": [0, 0, 0, 0, 0], "active_blocks_per_sm": [1, 1, 1, 1, 1]})
    got = _launches(hit)
    # groups: (b, 1s) rows 0 and 2; (a, 1s) row 1; (b, 2s) row 4; the row without a name in none
    assert got["name"].astype(object).tolist() == ["b", "a", "b"]
    assert got["calls"].tolist() == [2, 1, 1]
    assert got["tail_ns"].tolist() == [4, 2, 5]
    assert got["gpu_time_ns"].tolist() == [40, 20, 50]
    assert got["slots"].tolist() == [7, 8, 11]
    assert got["waves"].tolist() == [2.5, 1.5, 4.5]  # the first waves that is known


def test_top_by_of_categorical_names_by_hand():
    frame = pd.DataFrame({"name": pd.Categorical(["x", "y", None, "x", "z", "y"], categories=["z", "y", "x", "w"]),
                          "tail": [1, 5, 100, 2, 4, 1]})
    # sums: x 3, y 6, z 4; the missing name dropped
    assert top_by(frame, "name", "tail", 2) == ["y", "z"]
    assert top_by(frame, "name", "tail", 5) == ["y", "z", "x"]
    assert top_by(frame.astype({"name": object}), "name", "tail", 5) == ["y", "z", "x"]
