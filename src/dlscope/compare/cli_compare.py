"""`dlscope diff` and `dlscope check`: click commands the main CLI group adds.

``check`` exits 0 when no chosen metric regressed beyond the limit, 1 with the reason when one did; bad input
(missing or foreign database, unknown metric, bad threshold, a metric one run cannot provide) raises
DlscopeError, which the CLI turns into exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import DlscopeError


@click.command("diff")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--formats", default=None, help="Also write files: comma-separated md, csv, json.")
@click.option("-o", "--output-path", "out_dir", type=click.Path(path_type=Path), default=Path("."),
              help="Folder for the files of --formats.")
@click.option("--base-agg-id", type=int, default=None, help="Aggregation of BASE (default: the newest).")
@click.option("--new-agg-id", type=int, default=None, help="Aggregation of NEW (default: the newest).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on the terminal (only write --formats files).")
def diff_command(base, new, formats, out_dir, base_agg_id, new_agg_id, quiet) -> None:
    """Compare two profile databases: metrics, breakdown, op types, ops and kernels (BASE = before, NEW = after)."""
    from .diff import compare
    from .render import FORMATS, render_diff, write_diff

    wanted = [f.strip() for f in (formats or "").split(",") if f.strip()]
    unknown = [f for f in wanted if f not in FORMATS]
    if unknown:
        raise DlscopeError(f"unknown diff format: {', '.join(unknown)} (formats: {', '.join(FORMATS)})")
    d = compare(base, new, base_agg_id=base_agg_id, new_agg_id=new_agg_id)
    if not quiet:
        click.echo(render_diff(d), nl=False)
    for path in write_diff(d, out_dir, wanted) if wanted else []:
        click.echo(f"wrote {path}", err=True)


@click.command("check")
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--baseline", "base", type=click.Path(path_type=Path), required=True,
              help="Profile database of the reference run.")
@click.option("--max-regression", default="5%", show_default=True,
              help="How much worse than the baseline a metric may get, in percent.")
@click.option("--metric", "metrics", multiple=True,
              help="Metric to gate on (repeatable or comma-separated; default: avg_iteration_time). "
                   "See data/check_metrics.json.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--base-agg-id", type=int, default=None, help="Aggregation of the baseline (default: the newest).")
@click.option("--new-agg-id", type=int, default=None, help="Aggregation of NEW (default: the newest).")
def check_command(new, base, max_regression, metrics, as_json, base_agg_id, new_agg_id) -> None:
    """Fail (exit 1) when NEW regressed against the baseline beyond --max-regression: a CI gate."""
    from .check import check, parse_metrics, parse_threshold

    limit = parse_threshold(max_regression)
    names = parse_metrics(metrics)
    result = check(new, base, names, limit, new_agg_id=new_agg_id, base_agg_id=base_agg_id)
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        for w in result["warnings"]:
            click.echo(f"warning: {w['text']}")
        for r in result["results"]:
            mark = "FAIL" if r["regressed"] else "ok  " if r["available"] else "n/a "
            click.echo(f"{mark} {r['reason']}")
    missing = [r for r in result["results"] if not r["available"]]
    if missing:
        raise DlscopeError("; ".join(r["reason"] for r in missing))
    failed = [r for r in result["results"] if r["regressed"]]
    if failed:
        click.echo(f"dlscope check: FAILED: {'; '.join(r['reason'] for r in failed)}", err=True)
        raise click.exceptions.Exit(1)
    if not as_json:
        click.echo(f"dlscope check: passed ({len(result['results'])} metric(s) within {limit:g}% of the baseline)")
