"""``dlscope export DB [--iterations A:B] [--rank N] [--format chrome] -o FILE``: the profile as a trace file
that chrome://tracing and Perfetto UI open (and `dlscope import` reads back)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(short_help="Write the profile as a Chrome/Perfetto trace (JSON).")
@click.argument("database", type=click.Path(path_type=Path))
@click.option("-o", "--output-path", "output", type=click.Path(path_type=Path), required=True,
              help="Trace file to write (.json, or .json.gz to gzip it).")
@click.option("--iterations", default=None, metavar="A:B",
              help="Only iterations A to B (both included; A:, :B and A work too). Default: the whole profile.")
@click.option("--rank", type=int, default=None, help="Only this rank (default: every rank, one process each).")
@click.option("--format", "fmt", type=click.Choice(["chrome", "perfetto"]), default="chrome", show_default=True,
              help="chrome: Chrome trace JSON (chrome://tracing, Perfetto UI).")
@click.option("--agg-id", type=int, default=None,
              help="Aggregation whose iterations --iterations counts (default: the newest).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
def export_command(database, output, iterations, rank, fmt, agg_id, force) -> None:
    """Write the profile's ops, annotations, runtime calls, kernels, memory operations, synchronizations and
    allocator samples as a trace: each rank a process, each CPU thread and GPU stream a thread, launches joined
    to their kernels by flow arrows, times exact to the ns."""
    from .trace_export import export_trace, parse_iterations

    window = parse_iterations(iterations) if iterations is not None else None
    result = export_trace(database, output, iterations=window, rank=rank, fmt=fmt, force=force,
                           agg_id=agg_id)
    click.echo(result.describe(), err=True)
