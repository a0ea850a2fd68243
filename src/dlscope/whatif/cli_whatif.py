"""``dlscope whatif DB [--agg-id N] SCENARIO... [--json]``: what a change would be worth, before making it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..format import fmt_ns

EPILOG = """\b
Scenarios:
  no-dataloader        the step never waits for its batch
  amp                  FP32 GEMM/conv kernels at this GPU's FP16 Tensor Core speed (amp=F: a given factor)
  no-sync              no host synchronizations
  cuda-graphs          launch cost replaced by graph replay
  overlap-comm         communication fully overlapped with compute
  no-straggler         the slowest rank at the median's pace
  scale:PATTERN=F      kernels/ops matching PATTERN take F times as long (0.5: twice as fast)
\b
Example:
  dlscope whatif run.sqlite no-dataloader amp scale:nccl=0.5 --json
"""


@click.command(epilog=EPILOG, short_help="Predict the iteration time after a change (critical path, what-if).")
@click.argument("database", type=click.Path(path_type=Path))
@click.argument("scenarios", nargs=-1)
@click.option("--agg-id", type=int, default=None, help="Aggregation to replay (default: the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--top", type=int, default=10, show_default=True, help="Ops and kernels listed on the critical path.")
def whatif_command(database, scenarios, agg_id, as_json, top) -> None:
    """Replay the aggregation's iterations on their dependency graph and predict the iteration time with the
    SCENARIOS applied (each alone, then all together); show the critical path."""
    from . import whatif

    result = whatif(database, list(scenarios), agg_id, top)
    click.echo(json.dumps(result, indent=1) if as_json else render(result), nl=bool(as_json))


def render(r: dict) -> str:
    """The result for a terminal."""
    lines = [f"Aggregation {r['agg_id']} (rank {r['rank']}, {r['iterations']} iterations)",
             f"  measured iteration   {fmt_ns(r['baseline_iteration_ns']):>12}",
             (f"  replayed iteration   {fmt_ns(r['replay_iteration_ns']):>12}   "
              f"(largest error of one iteration {r['replay']['max_abs_error_pct']:.2f}%)")]
    if r["scenarios"]:
        lines.append("What if:")
        for s in r["scenarios"]:
            lines.append(f"  {s['name']:<24} {fmt_ns(s['predicted_iteration_ns']):>12}   saves "
                         f"{fmt_ns(s['saving_ns'])}   ({s['changed']})")
        c = r["combined"]
        lines.append(f"  {'all together':<24} {fmt_ns(c['predicted_iteration_ns']):>12}   saves "
                     f"{fmt_ns(c['saving_ns'])}")
    priced = r.get("expert_findings", {}).get("findings", [])
    if priced:
        lines.append("Expert findings priced by replay (saving over the aggregation: the rule's estimate → replayed):")
        lines += [f"  {f['rule']:<24} {fmt_ns(f['est_saving_ns']):>12} → {fmt_ns(f['simulated_saving_ns']):>12}   "
                  f"({f['not_priced'] if f.get('not_priced') else f['scenario']})" for f in priced]
        lines.append(f"  {'all together':<24} {'':>12}   {fmt_ns(r['expert_findings']['combined_saving_ns']):>12}")
    lines.append("Critical path (time on it over the aggregation):")
    for kind in ("category", "rank", "op", "kernel"):
        rows = [x for x in r["critical_path"] if x["kind"] == kind]
        if rows:
            lines.append(f"  by {kind}:")
            lines += [f"    {fmt_ns(x['time_ns']):>12}  {100 * x['share']:5.1f}%  {x['name'][:90]}" for x in rows]
    lines.append("Assumes:")
    lines += [f"  - {a}" for a in r["assumptions"]]
    return "\n".join(lines) + "\n"
