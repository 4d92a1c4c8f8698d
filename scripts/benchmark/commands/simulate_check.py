"""`simulate-check`: measure the regression check's false alarms and power on simulated series (CPU, seconds).

- Prints (and with --output writes) the markdown tables that the docs carry: per cell against last-run and band
  gates, slow drift, and per night (`--cells` cells judged together: per-cell and per-night false alarms, detection
  of a regression in one cell); see history/simulation.py for the noise model and the methods compared.

Caveats:
- numpy and scipy are imported inside the command body.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("simulate-check")
    def simulate_check(
        trials: Annotated[int, typer.Option(help="simulated series per table row")] = 4000,
        seed: Annotated[int, typer.Option(help="random seed")] = 0,
        between_run_share: Annotated[float, typer.Option(help="share of the step variance that is per run")] = 0.25,
        nights: Annotated[int, typer.Option(help="simulated nights per row of the per-night table")] = 1000,
        cells: Annotated[
            int, typer.Option(help="cells judged together in one night (a nightly job: a backend pair)")
        ] = 2,
        output: Annotated[Path | None, typer.Option(help="also write the table here")] = None,
    ) -> None:
        """False-alarm rate and detection power of this check vs last-run and Miles-band gates, same series.

        Example:

        \b
            run.py simulate-check --trials 4000 --output check-simulation.md
        """
        from scripts.benchmark.contracts.outputs import refuse_overwrite
        from scripts.benchmark.history.simulation import SimulationSettings, render_table, run_simulation

        if output is not None:
            refuse_overwrite(output, "--output")

        if trials < 100:
            raise typer.BadParameter(f"--trials must be >= 100 for rates to mean anything, got {trials}")
        if not 0 <= between_run_share <= 1:
            raise typer.BadParameter(f"--between-run-share must be in [0, 1], got {between_run_share}")
        if nights < 50 or cells < 1:
            raise typer.BadParameter(f"--nights must be >= 50 and --cells >= 1, got {nights} and {cells}")
        settings = SimulationSettings(
            trials=trials, seed=seed, between_run_share=between_run_share, nights=nights, cells=cells
        )
        table = render_table(run_simulation(settings))
        if output is not None:
            from miles.utils.bench_metrics import write_text_atomic

            write_text_atomic(output, table)
        typer.echo(table)
