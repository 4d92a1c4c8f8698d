"""`run.py convert-data`: write the VERL parquet files from a Miles jsonl slice (the plan's prepare step)."""

from __future__ import annotations

import typer


def convert_data(
    source: str = typer.Option(..., help="Miles jsonl (prompt + label rows)"),
    start: int = typer.Option(..., help="first row of the slice"),
    end: int = typer.Option(..., help="end row of the slice (exclusive)"),
    train_file: str = typer.Option(..., help="parquet to write"),
    val_file: str = typer.Option(..., help="small validation parquet to write"),
    val_rows: int = typer.Option(8, help="rows in the validation parquet"),
    input_key: str = typer.Option("prompt", help="jsonl field of the prompt"),
    label_key: str = typer.Option("label", help="jsonl field of the answer"),
    data_source: str = typer.Option("math_dapo", help="VERL data_source: routes rows to VERL's scorer"),
) -> None:
    """Convert Miles jsonl rows [start:end) to VERL parquet, keeping Miles's row order.

    Example:

    \b
        run.py convert-data --source dapo.jsonl --start 0 --end 96 --train-file d/t.parquet --val-file d/v.parquet
    """
    from pathlib import Path

    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.errors import UserError, require
    from scripts.benchmark.frameworks import registry  # noqa: F401  (the adapters declare the extras they need)
    from scripts.benchmark.frameworks.verl.data import convert_jsonl_to_parquet

    require("pyarrow")
    refuse_overwrite(Path(train_file), "--train-file", inputs=[Path(source), Path(val_file)])
    refuse_overwrite(Path(val_file), "--val-file", inputs=[Path(source)])

    try:
        report = convert_jsonl_to_parquet(
            source=source,
            start=start,
            end=end,
            train_file=train_file,
            val_file=val_file,
            val_rows=val_rows,
            input_key=input_key,
            label_key=label_key,
            data_source=data_source,
        )
    except OSError as exc:
        raise UserError(f"convert-data: {exc.filename or source}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise UserError(f"convert-data: {exc}") from exc
    typer.echo(f"wrote {report.train_rows} rows to {report.train_file} and {report.val_rows} to {report.val_file}")
    if report.rows_with_rm_type:
        typer.echo(
            f"note: {report.rows_with_rm_type} rows carry metadata.rm_type, which overrides Miles's --rm-type for them"
        )


def register(app: typer.Typer) -> None:
    app.command("convert-data")(convert_data)
