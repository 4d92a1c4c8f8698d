"""`run.py ingest` (a framework's native sink -> schema-v2 metrics.jsonl) and `run.py flops` (the FLOPs model).

- `ingest --framework NAME --model <preset|config.json> --gpus N [--rollout-gpus N] [--layout L] SOURCE... -o FILE`
  reads the sink files with that registered framework's reader (e.g. a Miles stdout log or event folder, a VERL
  FileLogger file; folders stand for their *.jsonl files), writes one StepRecord per line, and prints a one-line
  summary per step to stderr.
- `flops --model <preset|config.json> --seq-lens 1024,4096 [--json]` prints forward_flops and train_flops of one
  sequence per length, with each registered framework's own formula (its adapter's) next to ours.
- `--model` is a path to an HF config.json (or its folder), a name in scripts/benchmark/model_configs/, or a preset.

Caveats:
- Heavy or optional imports happen inside the command bodies, so `run.py --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer


def resolve_model_config(model: str) -> dict:
    """The HF config dict behind `--model` (spec.resolve_model_config), as a usage error when it names nothing."""
    from scripts.benchmark.spec import resolve_model_config as resolve

    try:
        return resolve(model)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _parse_seq_lens(text: str) -> list[int]:
    try:
        seq_lens = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"--seq-lens must be comma-separated integers, got {text!r}") from exc
    if not seq_lens or any(s <= 0 for s in seq_lens):
        raise typer.BadParameter(f"--seq-lens must hold positive integers, got {text!r}")
    return seq_lens


def flops_impl(model: str, seq_lens: list[int]) -> dict:
    """Our forward and train FLOPs per sequence, and each registered framework's own formula next to ours."""
    from scripts.benchmark.frameworks import registry

    from miles.utils.bench_flops import ModelArch, forward_flops, train_flops

    arch = ModelArch.from_hf_config(resolve_model_config(model))
    adapters = [registry.get(name) for name in registry.names()]
    rows = []
    for seq_len in seq_lens:
        ours = train_flops(arch, seq_len)
        native = {a.name: a.native_train_flops(arch, [seq_len]) for a in adapters}
        native = {name: value for name, value in native.items() if value is not None}
        rows.append(
            {
                "seq_len": seq_len,
                "forward_flops": forward_flops(arch, seq_len),
                "train_flops": ours,
                **{f"{name}_native_train_flops": value for name, value in native.items()},
                **{f"{name}_over_ours": value / ours for name, value in native.items()},
            }
        )
    return {"model": model, "model_type": arch.model_type, "per_sequence": rows}


def formula_names(row: dict) -> list[str]:
    """The frameworks whose own formula a `flops_impl` row carries, in registry order."""
    return [key.removesuffix("_over_ours") for key in row if key.endswith("_over_ours")]


def comparison_markdown(models: list[str], seq_lens: list[int]) -> str:
    """The docs table: train FLOPs per token of one sequence, ours, and each framework's own formula against it."""
    from scripts.benchmark.common.markdown import markdown_table
    from scripts.benchmark.frameworks import registry

    per_sequence = [row for model in models for row in flops_impl(model, seq_lens)["per_sequence"]]
    names = formula_names(per_sequence[0]) if per_sequence else []
    models_of_rows = [model for model in models for _ in seq_lens]
    rows = [
        [model, str(row["seq_len"]), f"{row['train_flops'] / row['seq_len'] / 1e9:.2f}"]
        + [f"{row[f'{name}_over_ours']:.3f}" for name in names]
        for model, row in zip(models_of_rows, per_sequence, strict=True)
    ]
    header = [
        "model",
        "seq len",
        "ours: train GFLOP/token",
        *(f"{registry.label_of(n)} formula / ours" for n in names),
    ]
    return markdown_table(header, rows, align=["left", "right", "right", *["right"] * len(names)])


def ingest_impl(
    *,
    framework: str,
    model: str,
    gpus: int,
    rollout_gpus: int | None,
    sources: list[Path],
    output: Path,
    device: str | None,
    peak_tflops: float | None,
    samples_per_step: int | None,
    optimizer_steps_per_step: int | None = None,
    max_response_tokens: int | None = None,
    layout: str | None = None,
    replay: bool = False,
) -> list:
    from scripts.benchmark.frameworks.sinks import build_step_records

    from miles.utils.bench_flops import ModelArch
    from miles.utils.bench_metrics import RunContext, write_records

    ctx = RunContext.build(
        arch=ModelArch.from_hf_config(resolve_model_config(model)),
        num_train_gpus=gpus,
        num_rollout_gpus=rollout_gpus,
        device_name=device,
        peak_tflops=peak_tflops,
        samples_per_step=samples_per_step,
        optimizer_steps_per_step=optimizer_steps_per_step,
        max_response_tokens=max_response_tokens,
        layout=layout,
        replay=replay,
    )
    records = build_step_records(framework, sources, ctx)
    write_records(output, records)
    return records


def register(app: typer.Typer) -> None:
    @app.command("flops")
    def flops(
        model: Annotated[str, typer.Option(help="preset name, model_configs name, or HF config.json path")],
        seq_lens: Annotated[str, typer.Option(help="comma-separated sequence lengths, e.g. 1024,4096")],
        json_output: Annotated[bool, typer.Option("--json/--table", help="print JSON, or a table")] = False,
        markdown: Annotated[
            bool,
            typer.Option(
                "--markdown/--no-markdown", help="print the docs table; --model may then list several, comma-separated"
            ),
        ] = False,
    ) -> None:
        """FLOPs of one sequence per length: forward, train (3x forward), and the frameworks' own formulas.

        Example:

        \b
            run.py flops --model qwen3-4b --seq-lens 1024,4096 --json
        """
        lengths = _parse_seq_lens(seq_lens)
        try:
            if markdown:
                typer.echo(comparison_markdown([m for m in model.split(",") if m], lengths))
                return
            result = flops_impl(model, lengths)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        if json_output:
            typer.echo(json.dumps(result, indent=2))
            return
        names = formula_names(result["per_sequence"][0]) if result["per_sequence"] else []
        typer.echo(
            f"{'seq_len':>8} {'forward_flops':>14} {'train_flops':>14}"
            + "".join(f" {name + '/ours':>10}" for name in names)
        )
        for row in result["per_sequence"]:
            typer.echo(
                f"{row['seq_len']:>8} {row['forward_flops']:>14.4e} {row['train_flops']:>14.4e}"
                + "".join(f" {row[f'{name}_over_ours']:>10.4f}" for name in names)
            )

    @app.command("ingest")
    def ingest(
        sources: Annotated[list[Path], typer.Argument(help="sink files or folders of *.jsonl files")],
        framework: Annotated[str, typer.Option(help="miles or verl")],
        model: Annotated[str, typer.Option(help="preset name, model_configs name, or HF config.json path")],
        gpus: Annotated[int, typer.Option(help="training GPUs of the job")],
        output: Annotated[Path, typer.Option("-o", "--output", help="metrics.jsonl to write")],
        rollout_gpus: Annotated[
            int | None, typer.Option(help="generating GPUs", show_default="--gpus, colocated")
        ] = None,
        device: Annotated[str | None, typer.Option(help="torch.cuda.get_device_name() of the training GPUs")] = None,
        peak_tflops: Annotated[float | None, typer.Option(help="MFU peak override, dense TFLOP/s per GPU")] = None,
        samples_per_step: Annotated[int | None, typer.Option(help="samples per step, when the sink lacks it")] = None,
        optimizer_steps_per_step: Annotated[
            int | None, typer.Option(min=1, help="optimizer steps per step (Miles train-step signals)")
        ] = None,
        max_response_tokens: Annotated[
            int | None, typer.Option(min=1, help="response-length cap (VERL truncation fraction)")
        ] = None,
        layout: Annotated[
            str | None,
            typer.Option(help="colocate or disaggregated: VERL's generation time is known only when colocated"),
        ] = None,
        replay: Annotated[
            bool, typer.Option("--replay/--no-replay", help="a train-only cell: trained on a recorded rollout")
        ] = False,
    ) -> None:
        """Read a framework's own metric sink and write schema-v2 records (one JSON object per line).

        Example:

        \b
            run.py ingest run/cells/verl-fsdp-colocate/rep-0/sink --framework verl --model qwen3-4b --gpus 8 -o m.jsonl
        """
        from scripts.benchmark.errors import UserError
        from scripts.benchmark.frameworks import registry

        if framework not in registry.names():
            raise UserError(f"--framework must be {' or '.join(registry.names())}, got {framework!r}")
        for option, value in (("--gpus", gpus), ("--rollout-gpus", rollout_gpus)):
            if value is not None and value < 1:
                raise UserError(f"{option} must be >= 1, got {value}")
        if layout not in (None, "colocate", "disaggregated"):
            raise UserError(f"--layout must be colocate or disaggregated, got {layout!r}")
        from scripts.benchmark.contracts.outputs import refuse_overwrite

        refuse_overwrite(output, "-o", inputs=sources)
        try:
            records = ingest_impl(
                framework=framework,
                model=model,
                gpus=gpus,
                rollout_gpus=rollout_gpus,
                sources=sources,
                output=output,
                device=device,
                peak_tflops=peak_tflops,
                samples_per_step=samples_per_step,
                optimizer_steps_per_step=optimizer_steps_per_step,
                max_response_tokens=max_response_tokens,
                layout=layout,
                replay=replay,
            )
        except ValueError as exc:
            raise UserError(f"ingest: {exc}") from exc
        for record in records:
            flags = f" flags={','.join(record.flags)}" if record.flags else ""
            print(f"step {record.step}: step_time_s={record.step_time_s}{flags}", file=sys.stderr)
        typer.echo(f"wrote {len(records)} records to {output}")
