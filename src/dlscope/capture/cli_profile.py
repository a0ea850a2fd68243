"""``dlscope profile [options] -- COMMAND [ARGS...]``: profile an unmodified training script."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .runner import DLSCOPE_FAILED, ProfileRequest, run_profile
from .schedule import DEFAULT_ACTIVE, DEFAULT_WAIT, DEFAULT_WARMUP

EPILOG = """\b
Examples:
  dlscope profile -o mlp.sqlite -- python examples/mlp.py
  dlscope profile --steps 20 --batch-size 64 -- python -m mypkg.train --epochs 1
  dlscope profile --backend nsys -o run.sqlite -- python train.py
  dlscope profile --framework jax -o jax.sqlite -- python examples/jax_mlp.py

Steps are counted at each optimizer.step() (or dlscope.step() in loops without an optimizer):
the first --wait steps are skipped, --warmup more run with the profiler warming up, then --steps
are recorded and the program runs on without the profiler.
"""


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
               epilog=EPILOG, short_help="Run a training command and profile it.")
@click.option("-o", "--output", "output", default="dlscope_profile.sqlite", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path), help="Profile database to write.")
@click.option("--backend", type=click.Choice(["torch", "nsys"]), default="torch", show_default=True,
              help="torch: torch.profiler inside the program (no GPU needed); nsys: Nsight Systems + NVTX.")
@click.option("--framework", type=click.Choice(["torch", "jax", "tf", "paddle"]), default="torch",
              show_default=True,
              help="Whose profiler records: torch.profiler, or JAX's, TensorFlow's or PaddlePaddle's own "
                   "(steps: dlscope.step(), else the jitted step function / Keras fit / optimizer.step()).")
@click.option("--delay", type=click.FloatRange(min=0), default=None,
              help="Seconds to let the program run before capturing (checked at step boundaries).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds to capture (without --steps: capture for this long instead of a step count).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help=f"Steps to capture [default: {DEFAULT_ACTIVE}, or unlimited with --duration].")
@click.option("--wait", type=click.IntRange(min=0), default=DEFAULT_WAIT, show_default=True,
              help="Steps to skip before warming up.")
@click.option("--warmup", type=click.IntRange(min=0), default=DEFAULT_WARMUP, show_default=True,
              help="Steps to run with the profiler on but not recorded.")
@click.option("--iter-start", type=int, default=None, help="First captured iteration to aggregate.")
@click.option("--iter-stop", type=int, default=None, help="Last captured iteration to aggregate (inclusive).")
@click.option("--key-node", default=None, help="Op or range name that marks the start of each iteration.")
@click.option("--profile-name", default=None, help="Name shown in the summary and the viewer.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Samples per step, for throughput [default: first dimension of the first batch].")
@click.option("--sample-unit", default=None,
              help="What a sample is, for throughput: images, tokens, sequences … [default: samples].")
@click.option("--profile-memory", is_flag=True,
              help="Record every allocation and free (torch.profiler's profile_memory): memory over time, the peak "
                   "per iteration and the op at each peak (torch backend).")
@click.option("--with-stack", is_flag=True,
              help="Record Python call stacks (torch.profiler's with_stack): the Python Call Stacks view (a flame "
                   "graph of CPU time per Python frame) and each op's file:line (torch backend).")
@click.option("--view", is_flag=True, help="Open the viewer when done.")
@click.option("--force", is_flag=True, help="Overwrite the output database.")
@click.option("--keep-trace", is_flag=True, help="Keep the raw trace next to the database.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile_command(output, backend, framework, delay, duration, steps, wait, warmup, iter_start, iter_stop, key_node,
                    profile_name, batch_size, sample_unit, profile_memory, with_stack, view, force, keep_trace,
                    command):
    """Run COMMAND as if run directly, capture it, import it into a profile database and print the summary.

    COMMAND is a Python program (`python train.py ...`, `python -m pkg ...`, `train.py`); with
    --backend nsys any program. Its argv, working directory, stdout/stderr and exit status are its own;
    dlscope writes only to stderr.
    """
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    request = ProfileRequest(command=command, output=output, backend=backend, framework=framework, delay=delay,
                             duration=duration, steps=steps, wait=wait, warmup=warmup, iter_start=iter_start,
                             iter_stop=iter_stop, key_node=key_node, profile_name=profile_name, batch_size=batch_size,
                             sample_unit=sample_unit,
                             force=force, keep_trace=keep_trace, profile_memory=profile_memory,
                             with_stack=with_stack)
    status = run_profile(request)
    if view and status != DLSCOPE_FAILED and output.is_file():
        from ..viewer.cli_view import serve

        serve([output], open_browser=True)
    sys.exit(status)
