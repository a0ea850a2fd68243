"""The rules give the same findings from the in-memory tables (import) as from the database (re-aggregation)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import data_file
from dlscope.experts import evaluate

FILES = [("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"),
         ("kineto", "tracelens_h100_qwen1.5_0.5b_infer.json.gz"),
         ("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz"),
         ("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite")]


@pytest.mark.parametrize("folder,name", FILES, ids=[n for _, n in FILES])
def test_findings_from_memory_equal_findings_from_the_database(folder, name, import_db):
    conn = sqlite3.connect(import_db(data_file(folder, name)))
    stored = [(r, json.loads(e), s) for r, e, s in conn.execute(
        "SELECT rule, evidence_json, est_saving_ns FROM findings WHERE agg_id = 1 ORDER BY finding_id")]
    fresh = [(f["rule"], json.loads(json.dumps(f["evidence"], default=lambda v: v.item())), f["est_saving_ns"])
             for f in evaluate(conn, 1)]
    assert stored == fresh
    assert stored, "expected findings on this profile"
