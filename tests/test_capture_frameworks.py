"""``dlscope profile --framework jax|paddle|tf`` on CPU: the database holds the steps the program ran.

Each test skips when the framework is not installed (``pip install "dlscope[jax]"`` / ``[paddle]`` / ``[tf]``).
The program counts its own steps; the oracle is that count and what each step ran (one call of the step
function, one optimizer update per parameter), read from the events, never from dlscope's own iteration list.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STEPS, WAIT, WARMUP, ACTIVE = 8, 1, 1, 4


def needs(module: str, extra: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f'{module} is not installed (pip install "dlscope[{extra}]")')


def profile(tmp_path: Path, framework: str, script: Path, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    db = tmp_path / f"{framework}.sqlite"
    result = subprocess.run([sys.executable, "-m", "dlscope", "profile", "--framework", framework, "-o", db,
                             "--wait", str(WAIT), "--warmup", str(WARMUP), "--steps", str(ACTIVE),
                             "--", sys.executable, script, *args],
                            check=False, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return db, result


def summary(db: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "dlscope", "summary", db, "--json"], check=False, capture_output=True,
                         text=True, timeout=300)
    return json.loads(out.stdout)


def per_iteration(db: Path, sql: str) -> dict[int, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute(sql).fetchall())


@pytest.mark.slow
@needs("jax", "jax")
def test_jax_example_capture_has_the_steps_it_ran(tmp_path):
    db, result = profile(tmp_path, "jax", REPO / "examples" / "jax_mlp.py", "--steps", str(STEPS))
    facts = summary(db)
    expected = list(range(WAIT + WARMUP, WAIT + WARMUP + ACTIVE))
    assert facts["capture"]["steps_seen"] == STEPS
    assert facts["capture"]["captured_steps"] == expected
    assert facts["aggregation"]["iteration_method"] == "profiler_step"
    # each iteration holds exactly one top-level call of the jitted step function
    calls = per_iteration(db, """SELECT o.iteration, COUNT(*) FROM ops o LEFT JOIN ops p ON p.op_id = o.parent_id
                                 WHERE o.name = 'PjitFunction(train_step)'
                                   AND (p.name IS NULL OR p.name != o.name) AND o.iteration >= 0
                                 GROUP BY o.iteration""")
    assert calls == {i: 1 for i in expected}
    assert "no GPU kernels" in result.stderr


PADDLE_PROGRAM = """
    import json, sys
    import paddle
    from paddle.io import DataLoader, TensorDataset
    paddle.seed(0)
    x, y = paddle.randn([8 * {steps}, 16]), paddle.randn([8 * {steps}, 1])
    model = paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 1))
    opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
    steps = 0
    for xb, yb in DataLoader(TensorDataset([x, y]), batch_size=8):
        loss = paddle.nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
        opt.clear_grad()
        steps += 1
    json.dump({{"steps": steps, "parameters": len(model.parameters())}}, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
@needs("paddle", "paddle")
def test_paddle_capture_has_the_steps_it_ran(tmp_path):
    script = tmp_path / "train_paddle.py"
    script.write_text(textwrap.dedent(PADDLE_PROGRAM.format(steps=STEPS)))
    ran = tmp_path / "ran.json"
    db, _ = profile(tmp_path, "paddle", script, str(ran))
    program = json.loads(ran.read_text())
    facts = summary(db)
    expected = list(range(WAIT + WARMUP, WAIT + WARMUP + ACTIVE))
    assert facts["capture"]["steps_seen"] == program["steps"] == STEPS
    assert facts["capture"]["captured_steps"] == expected
    assert facts["aggregation"]["iteration_method"] == "profiler_step"
    # one SGD update op per parameter in every captured step, and the data loading is seen
    updates = per_iteration(db, "SELECT iteration, COUNT(*) FROM ops WHERE op_type = 'sgd_' AND iteration >= 0 "
                                "GROUP BY iteration")
    assert updates == {i: program["parameters"] for i in expected}
    assert facts["aggregation"]["resource_breakdown_ns"]["dataloader"] > 0


TF_PROGRAM = """
    import json, sys
    import numpy as np
    import tensorflow as tf
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.random.rand(8 * {steps}, 16).astype("float32"), np.random.rand(8 * {steps}, 1).astype("float32")
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    json.dump({{"steps": {steps}}}, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
@needs("tensorflow", "tf")
def test_tf_keras_capture_has_the_steps_it_ran(tmp_path):
    script = tmp_path / "train_tf.py"
    script.write_text(textwrap.dedent(TF_PROGRAM.format(steps=STEPS)))
    db, _ = profile(tmp_path, "tf", script, str(tmp_path / "ran.json"))
    facts = summary(db)
    assert facts["capture"]["steps_seen"] == STEPS
    assert facts["aggregation"]["iterations_profiled"] == ACTIVE
