"""`dlscope characterize`: measure this machine's roofs and write them as a ``--gpu-spec`` file."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("characterize")
@click.option("-o", "--output", "output", type=click.Path(path_type=Path), default=Path("machine.json"),
              show_default=True, help="The spec file to write (the shape `report --gpu-spec` reads).")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="What to measure (default: the GPU when torch sees one, else the CPU).")
@click.option("--matmul-n", type=int, default=None, help="Matrix size of the FLOP/s GEMMs (default 8192 GPU, 512 CPU).")
@click.option("--repeats", type=int, default=5, show_default=True, help="Timed calls per figure (the best counts).")
@click.option("--threads", type=int, default=None, help="CPU threads torch may use (default: torch's).")
@click.option("--no-elementwise", "no_elementwise", is_flag=True,
              help="Skip the torch.compile'd FMA / no-FMA / CUDA-core FP16 kernels (each compiles for seconds).")
def characterize_command(output, device, matmul_n, repeats, threads, no_elementwise) -> None:
    """Measure peak FLOP/s per precision and bandwidth per memory level (seed 004's Empirical Roofline
    Toolkit, with torch) and write a --gpu-spec file for `dlscope report --reports roofline`."""
    from ..errors import DlscopeError
    from .ceilings import load_spec_file
    from .characterize import characterize

    if (matmul_n is not None and matmul_n < 1) or repeats < 1 or (threads is not None and threads < 1):
        raise DlscopeError("--matmul-n, --repeats and --threads must be positive")
    entry = characterize(device, matmul_n=matmul_n, repeats=repeats, threads=threads,
                         elementwise=not no_elementwise)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(entry, indent=1) + "\n")
    ceilings = load_spec_file(output)  # what the roofline will read back
    for name, rate in ceilings.flops.items():
        click.echo(f"{name:>12}: {rate / 1e12:9.3f} TFLOP/s")
    for precision, rate in ceilings.no_fma.items():
        click.echo(f"{precision + ' no-FMA':>12}: {rate / 1e12:9.3f} TFLOP/s")
    for level, rate in ceilings.bandwidth.items():
        click.echo(f"{level:>12}: {rate / 1e9:9.1f} GB/s")
    click.echo(str(output))
