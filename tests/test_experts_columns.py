"""The rules' numpy columns (``Context.col``) and lookups (``op_rows``, ``api_rows``, ``spans.distinct``) give
what pandas gives on the same frames: the rules read them instead of the frames to save pandas' per-call cost
on the ranks of a job, so they must be the frames' values, row for row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import data_file

from dlscope.experts.spans import distinct

FRAMES = ("kernels", "kernel_facts", "memops", "api_calls", "ops", "ops_all", "ranges", "gpu_activity", "gpus")


@pytest.fixture(scope="module")
def job_contexts():
    """A Context per rank of the real 8-rank DLRM job, over the job's shared frames (as the pipeline makes them)."""
    from dlscope.analyze.aggregation import JobAggregation
    from dlscope.analyze.analysis import analyse
    from dlscope.experts import Context, RuleFrames, load_config
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.pipeline.inputs import expand_inputs

    an = analyse(load_profiles_parallel(expand_inputs([data_file("kineto", "param_dlrm_8rank_v100")]), workers=1))
    job = JobAggregation(an, an.ranks, None, None)
    frames = RuleFrames({name: an.profile.table(name) for name in an.RAW}, job.bounds()).make_all()
    config = load_config(None)
    return [Context(config, an.rank_tables(rank), job.aggregate(rank), frames) for rank in an.ranks]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values and dtype, missing values (NaN) in the same rows."""
    return a.dtype == b.dtype and pd.Series(a).equals(pd.Series(b))


def test_columns_are_the_rank_frames_values_read_only(job_contexts):
    checked = 0
    for ctx in job_contexts:
        for name in FRAMES:
            frame = getattr(ctx, name)
            for column in frame.columns:
                values = ctx.col(name, column)
                assert _same(values, frame[column].to_numpy()), (ctx.rank, name, column)
                assert not values.flags.writeable
                checked += len(values)
            assert ctx.frames.has_column(name, frame.columns[0]) and not ctx.frames.has_column(name, "no such")
    assert checked > 100_000


def test_op_and_api_rows_are_pandas_get_indexer(job_contexts):
    others = job_contexts[1].ops_all["op_id"].to_numpy()[:50]  # another rank's ops: not found
    for ctx in job_contexts[:3]:
        ops, api = ctx.ops_all, ctx.api_calls
        wanted = np.concatenate([ops["op_id"].to_numpy()[::-7], others, [-1, 10**12]])
        assert ctx.op_rows(wanted).tolist() == ops.index.get_indexer(wanted).tolist()
        calls = np.concatenate([ctx.kernel_facts["api_id"].to_numpy(), [-1, 10**12]])
        assert ctx.api_rows(calls).tolist() == pd.Index(api["api_id"]).get_indexer(calls).tolist()
        assert (ctx.op_rows(ops["op_id"]) >= 0).all() and (ctx.api_rows(calls[:-2]) >= 0).any()


def test_distinct_is_numpy_unique():
    assert distinct(np.array([5, 3, 5, -1, 3], dtype=np.int64)).tolist() == [-1, 3, 5]
    assert distinct(np.zeros(0, dtype=np.int64)).tolist() == []
    values = np.random.default_rng(21).integers(-50, 50, 10_000)
    assert distinct(values).tolist() == sorted(set(values.tolist()))


def test_kernel_precisions_of_categorical_names_are_those_of_each_name():
    from dlscope.experts.precision_names import kernel_precision, kernel_precisions

    names = ["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn", "volta_sgemm_128x64_nn", None,
             "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x32", "volta_sgemm_128x64_nn", ""]
    categories = sorted({n for n in names if n is not None} | {"unused_kernel"})
    column = pd.Series(pd.Categorical(names, categories=categories))
    want = [kernel_precision(n or "") for n in names]
    assert kernel_precisions(column).tolist() == want
    assert kernel_precisions(pd.Series(names, dtype=object)).tolist() == want
    assert {"fp16", "fp32", "bf16"} <= set(want)
