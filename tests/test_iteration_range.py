"""The iterations an aggregation covers (``--iter-start`` / ``--iter-stop``): chosen by number, whatever order
the trace lists its steps in, and a range outside the profile is a clear error."""

from __future__ import annotations

import pytest
from trace_builder import KinetoTrace

from dlscope.analyze.aggregation import JobAggregation, resolve_range
from dlscope.analyze.analysis import analyse
from dlscope.errors import DlscopeError
from dlscope.importers import load


@pytest.fixture
def analysed(tmp_path):
    trace = KinetoTrace()
    for n, ts in ((7, 200), (5, 0), (6, 100)):  # steps listed out of order
        trace.step(n, ts, ts + 90)
        trace.op("aten::mm", ts + 10, ts + 50)
    return analyse(load(trace.write(tmp_path / "t.json")))


def test_the_range_is_chosen_by_iteration_number_and_its_window_runs_from_the_first_to_the_last(analysed):
    rank = analysed.ranks[0]
    assert resolve_range(analysed, rank, None, None)["iteration"].tolist() == [5, 6, 7]
    assert resolve_range(analysed, rank, 6, None)["iteration"].tolist() == [6, 7]
    assert resolve_range(analysed, rank, None, 6)["iteration"].tolist() == [5, 6]
    job = JobAggregation(analysed, [rank], 6, 7)
    it_start, it_stop, lo, hi = job.bounds()[rank]
    assert (it_start, it_stop) == (6, 7)
    assert (lo, hi) == (100_000, 290_000)  # µs in the trace, ns here: step 6's start to step 7's end


@pytest.mark.parametrize("start, stop, words", [(8, None, "no iterations from 8 to 7; the profile has iterations 5..7"),
                                                (None, 4, "no iterations from 5 to 4; the profile has iterations 5..7"),
                                                (7, 6, "--iter-start 7 is after --iter-stop 6")])
def test_a_range_outside_the_profile_is_an_error_that_says_what_the_profile_has(analysed, start, stop, words):
    with pytest.raises(DlscopeError, match=words.replace(".", r"\.")):
        resolve_range(analysed, analysed.ranks[0], start, stop)
