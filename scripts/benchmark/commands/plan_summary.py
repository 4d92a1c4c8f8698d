"""What the main command prints once a plan is written: its cells, repeats, cost (plan/cost.py), train-only or
learning-run facts (with the learning guard's power and the cost at the repeats it needs: power_notes.py),
preparation steps and parity counts."""

from __future__ import annotations

import typer


def print_summary(plan, written, out, repeats: int, cost, cost_store: str | None = None) -> None:
    from scripts.benchmark.commands.power_notes import plan_power_lines
    from scripts.benchmark.plan.cost import cost_lines

    data = plan.data
    typer.echo(f"spec {data['spec']['name']} ({data['spec_hash']}), {len(data['cells'])} cell(s):")
    for cell in data["cells"]:
        gpus = cell["gpus"]
        typer.echo(
            f"  {cell['id']:<32} {gpus['train']} train + {gpus['rollout']} rollout GPUs "
            f"({gpus['total']} total), {cell['num_steps']} steps -> {out / cell['script']}"
        )
    if data.get("sequential"):
        typer.echo(
            f"  sequential: rounds of one launch a side until the paired check decides, from "
            f"{data['sequential']['min_rounds']} to {data['sequential']['max_rounds']} rounds"
            + (f" or the {data['budget_minutes']:g}-minute budget" if data.get("budget_minutes") else "")
        )
    else:
        typer.echo(
            f"  repeats: {repeats} interleaved per cell, {repeats}x the GPU time of one pass"
            + (
                " (intervals include run-to-run variation)"
                if repeats > 1
                else " (intervals cannot include run-to-run variation; comparisons default to 3)"
            )
        )
    for line in cost_lines(cost):
        typer.echo(line)
    if data["spec"]["run"].get("mode") == "learning":
        typer.echo(_learning_run_line(data))
        for line in plan_power_lines(data, cost, cost_store):
            typer.echo(line)
    if data.get("recording"):
        typer.echo(_recording_line(data["recording"]))
    for step in data["prepare"]:
        typer.echo(f"  prepare {step['name']}: creates {step['creates']}")
    for pair in plan.parity.pairs:
        c = pair.counts
        typer.echo(
            f"  parity {pair.candidate_cell} vs {pair.reference_cell}: {c['matched']} matched, "
            f"{c['asymmetry']} declared asymmetries, {c['MISMATCH']} mismatches"
        )
    for warning in data["warnings"]:
        typer.echo(f"warning: {warning}")
    typer.echo(f"wrote {len(written)} files under {out}")


def _recording_line(recording) -> str:
    """A train-only plan: who records, where the recording is kept, and whether it already exists here."""
    digest = f"digest {recording['digest']}" if recording.get("digest") else "recorded by the first run, then reused"
    code = f", {recording['checkout']} at {recording['commit'][:12]}" if recording.get("commit") else ""
    if recording.get("shared") is False:
        digest = "recorded for this plan folder only: no commit names the code of "
        digest += f"{recording['checkout']} here (not a git checkout, or uncommitted changes)"
    return (
        f"  train-only: every cell replays one recording by {recording['recorder']} ({recording['backend']}, "
        f"{recording['layout']}{code}), key {recording['key']} in {recording['root']} ({digest})"
    )


def _learning_run_line(data) -> str:
    """What a learning run is, beside its cost lines: many steps of the preset's own batch."""
    batch = data["spec"]["batch"]
    return (
        f"  learning run: {data['spec']['run']['num_steps']} steps of the same batch ({batch['prompts_per_step']} "
        f"prompts x {batch['samples_per_prompt']} samples)"
    )
