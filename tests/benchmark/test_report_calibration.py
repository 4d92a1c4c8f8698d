"""The report's calibration view: each cell against the measured peak, the roofline and the weight-sync floor."""

import pytest

from scripts.benchmark.analysis.calibration_view import calibration_view
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.commands.report import report_impl
from tests.benchmark.synthetic_runs import write_run_folder
from tests.benchmark.test_report import REPS, planted_cells


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    run_dir = write_run_folder(tmp_path_factory.mktemp("planted"), planted_cells())
    doc, _ = report_impl(run_dir, AnalysisSettings(reps=REPS))
    return run_dir, doc


class TestCalibrationHook:
    def test_measured_peak_and_roofline_fractions(self, planted_run):
        """With the two readers given, MFU against the measured peak and the roofline fraction are tflops / ceiling."""
        _, doc = planted_run
        seen = []

        def roofline(device, preset, grad_ckpt, *, backend):
            seen.append((device, preset, grad_ckpt, backend))
            return 400.0

        rows = calibration_view(
            [c.model_dump() for c in doc.cells],
            measured_peak_tflops=lambda device: 800.0 if device == "NVIDIA H200" else None,
            roofline_tflops=roofline,
            preset="qwen3-1.7b-base",
            grad_ckpt_by_backend={"fsdp": False},
        )
        row = rows[0]
        assert row.mfu_measured_peak == pytest.approx(row.train_tflops_per_gpu / 800.0)
        assert row.fraction_of_roofline == pytest.approx(row.train_tflops_per_gpu / 400.0)
        assert seen[0] == ("NVIDIA H200", "qwen3-1.7b-base", False, doc.cells[0].backend) and seen[2][2] is True
        assert [call[3] for call in seen] == [cell.backend for cell in doc.cells]

    def test_roofline_fraction_carries_the_roofline_spread(self, planted_run):
        """The fraction is also given at the roofline's p90 and p10 (low, high) with the run-to-run spread."""
        _, doc = planted_run
        rows = calibration_view(
            [c.model_dump() for c in doc.cells],
            measured_peak_tflops=lambda device: None,
            roofline_tflops=lambda *a, **k: 400.0,
            preset="qwen3-1.7b-base",
            grad_ckpt_by_backend={},
            roofline_spread=lambda *a, **k: {"p10": 380.0, "p90": 420.0, "run_to_run_pct": 1.5},
        )
        tflops = rows[0].train_tflops_per_gpu
        assert rows[0].fraction_of_roofline_range == [pytest.approx(tflops / 420.0), pytest.approx(tflops / 380.0)]
        assert rows[0].roofline_run_to_run_pct == 1.5
        unspread = calibration_view(
            [c.model_dump() for c in doc.cells],
            measured_peak_tflops=lambda device: None,
            roofline_tflops=lambda *a, **k: None,
            preset="qwen3-1.7b-base",
            grad_ckpt_by_backend={},
            roofline_spread=lambda *a, **k: {"p10": 380.0, "p90": 420.0, "run_to_run_pct": 1.5},
        )
        assert unspread[0].fraction_of_roofline_range is None

    def test_weight_sync_is_set_against_its_floor_for_the_cell_layout(self, planted_run):
        """Colocated cells are held against one on-GPU copy of all weights; the ratio is phase median / floor."""
        _, doc = planted_run
        asked = []

        def floor(device, model, path):
            asked.append((device, model, path))
            return 0.5

        rows = calibration_view(
            [c.model_dump() for c in doc.cells],
            measured_peak_tflops=lambda device: None,
            roofline_tflops=lambda *a, **k: None,
            preset="qwen3-1.7b-base",
            grad_ckpt_by_backend={},
            weight_sync_floor_s=floor,
        )
        for cell, row in zip(doc.cells, rows, strict=True):
            sync = cell.summaries["phases_s.weight_sync"].median
            assert row.weight_sync_floor_s == 0.5 and row.weight_sync_floor_path == "d2d_copy"
            assert row.weight_sync_over_floor == (pytest.approx(sync / 0.5) if sync is not None else None)
        assert {call[2] for call in asked} == {"d2d_copy"} and len(asked) == len(rows)

    def test_committed_h200_calibration_gives_a_copy_floor(self, planted_run):
        """With the committed H200 JSON the report fills the d2d floor of the cells' model."""
        from scripts.benchmark.calibration.results import weight_sync_floor_s

        run_dir, doc = planted_run
        expected = weight_sync_floor_s("NVIDIA H200", "qwen3-1.7b-base", "d2d_copy")
        assert expected is not None and 0 < expected < 1
        assert [row.weight_sync_floor_s for row in doc.calibration] == [expected] * len(doc.calibration)
        assert "### Weight sync against its floor" in (run_dir / "report.md").read_text()

    def test_report_reads_the_committed_calibration_module(self, planted_run):
        """calibration/results.py is read: each cell gets a calibration row; unmeasured numbers stay null."""
        run_dir, doc = planted_run
        from scripts.benchmark.calibration.results import measured_peak_tflops

        assert doc.calibration is not None and len(doc.calibration) == 4
        row = doc.calibration[0]
        peak = measured_peak_tflops("NVIDIA H200")
        assert row.measured_peak_tflops == peak
        assert row.grad_ckpt is True and doc.calibration[2].grad_ckpt is False
        if peak is None:
            assert row.mfu_measured_peak is None
        assert "## Calibration: measured peak and roofline" in (run_dir / "report.md").read_text()

    def test_report_shows_the_roofline_fraction_with_its_spread(self, planted_run):
        """With the committed H200 roofline, every calibration row carries the fraction's range and run spread."""
        run_dir, doc = planted_run
        rows = [r for r in doc.calibration if r.roofline_tflops is not None]
        assert rows, "the planted cells' model has a committed roofline"
        for row in rows:
            low, high = row.fraction_of_roofline_range
            assert low <= row.fraction_of_roofline <= high and 0 <= row.roofline_run_to_run_pct <= 5
        markdown = (run_dir / "report.md").read_text()
        assert "of roofline (at roofline p90 - p10; runs apart)" in markdown
