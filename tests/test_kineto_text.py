"""The Kineto importer's text columns: each batch's strings encoded by Arrow where they are read (names,
kinds, the ops' inputs as compact JSON), the batches' words joined into one categorical column."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from conftest import data_file
from raw_kineto import OP_CATS, events, is_step_marker

from dlscope.importers.kineto import Reading, load_kineto
from dlscope.model import text_column


def _compact(value) -> str:
    """The compact JSON text of an op's input list as the standard library writes it ("" when absent)."""
    return "" if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("name", ["tracelens_b200_llm_serving_rank0of8.json.gz",
                                  "hta_a100_nccl_rank0of2_3steps.json.gz"])
def test_every_ops_inputs_are_the_compact_json_of_the_raw_args(name):
    path = data_file("kineto", name)
    raw = [e for e in events(path) if e.cat in OP_CATS and not is_step_marker(e.name)]
    keys = {"input_shapes": "Input Dims", "input_dtypes": "Input type", "concrete_inputs": "Concrete Inputs"}
    expected = Counter((e.name, *(_compact(e.args.get(k)) for k in keys.values())) for e in raw)
    # small pieces: many batches, each with its own words
    ops = load_kineto(path, reading=Reading(method="in_memory", processes=1, piece_bytes=64 * 1024)).ops
    got = Counter(zip(ops["name"], *(ops[c] for c in keys)))
    assert got == expected
    assert sum(got.values()) == len(raw) > 1000


def test_the_same_list_written_with_other_spaces_is_one_word(tmp_path):
    ops = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
            "args": args} for i, args in enumerate([{}, {"Input Dims": None}])]
    text = json.dumps({"traceEvents": ops})[:-2]  # the last two ops written by hand, spaced differently
    text += (', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1,'
             ' "args": {"Input Dims": [[2, 3],\n [ ]], "Input type": ["float" , "int"]}}'
             ', {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 6, "dur": 1,'
             ' "args": {"Input Dims": [[2,3],[]], "Input type": ["float","int"]}}]}')
    path = tmp_path / "t.json"
    path.write_text(text)
    ops = load_kineto(path).ops
    assert list(ops["input_shapes"]) == ["", "", "[[2,3],[]]", "[[2,3],[]]"]
    assert list(ops["input_dtypes"]) == ["", "", '["float","int"]', '["float","int"]']
    assert list(ops["input_shapes"].cat.categories) == ["", "[[2,3],[]]"]


def test_batches_with_different_words_join_as_the_strings_would():
    batches = [["relu", "gemm", "relu"], ["copy", "relu"], ["gemm"]]
    chunked = pa.chunked_array([pa.array(b, type=pa.large_string()).dictionary_encode() for b in batches])
    column = text_column(chunked)
    strings = [w for b in batches for w in b]
    assert list(column) == strings
    assert list(column.categories) == sorted({"", *strings})


def test_op_scopes_are_the_enclosing_annotations_then_the_enclosing_ops(tmp_path):
    """PRODUCT.md's group path, written out by hand: the annotation ranges open at the op node's start (the
    iteration's ProfilerStep excluded), then the names of the ops it is nested in."""
    from dlscope.analyze.analysis import analyse

    def event(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    events = [event("user_annotation", "ProfilerStep#1", 0, 200), event("user_annotation", "encoder", 1, 99),
              event("user_annotation", "layer1", 10, 40),
              event("cpu_op", "aten::linear", 12, 28), event("cpu_op", "aten::addmm", 13, 17),
              event("cpu_op", "aten::mm", 14, 6),
              event("cpu_op", "aten::linear", 41, 7), event("cpu_op", "aten::addmm", 42, 5),
              event("cpu_op", "aten::relu", 60, 10), event("cpu_op", "aten::add", 110, 10)]
    path = tmp_path / "scopes.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ops = analyse(load_kineto(path)).profile.ops.sort_values("start")
    assert list(zip(ops["name"], ops["scope"])) == [
        ("aten::linear", "encoder/layer1"), ("aten::addmm", "encoder/layer1/aten::linear"),
        ("aten::mm", "encoder/layer1/aten::linear/aten::addmm"),
        ("aten::linear", "encoder/layer1"), ("aten::addmm", "encoder/layer1/aten::linear"),
        ("aten::relu", "encoder"), ("aten::add", "")]
