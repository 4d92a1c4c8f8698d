"""The schedule rows of the parity table: what the two frameworks do around generation and the weight update (KV
pool, old-policy weight copies, prefill graphs, engine versions, loop shape, first steps) is read from the launches
and from VERL's own config and code, and a row says `matched` only where both do the same work; the report's phase
map keeps phases the two measure differently out of the step-time attribution."""

import ast
import json
from functools import cache

import pytest
from omegaconf import OmegaConf
from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.contracts.parity import ParityPair, parity_text
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.miles.flags import flag_default, load_inventory
from scripts.benchmark.frameworks.miles.launch import build_miles_launch
from scripts.benchmark.frameworks.miles.parity_knobs import parse_miles
from scripts.benchmark.frameworks.verl.config import compose_overrides
from scripts.benchmark.frameworks.verl.data import converted_paths, prepare_step
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch, overrides_of
from scripts.benchmark.frameworks.verl.parity_knobs import parse_verl
from scripts.benchmark.plan.parity import ParityError, ParitySide, build_parity, parity_file
from scripts.benchmark.report.headline import main_component
from scripts.benchmark.spec import BACKENDS, LAYOUTS, BenchmarkSpec, load_preset, preset_names, with_overrides
from scripts.benchmark.spec.benchmark import spec_hash, spec_json
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder

AR = "actor_rollout_ref"
FREE_CACHE = f"{AR}.rollout.free_cache_engine"


@cache
def _launches(preset: str, backend: str, layout: str):
    spec = with_overrides(load_preset(preset), layout=layout)
    train, val = converted_paths(spec, "/out/data")
    miles = build_miles_launch(spec, backend, layout)
    verl = build_verl_launch(spec, backend, layout, VerlData(train, val))
    return tuple(miles.argv), tuple(verl.argv), tuple(prepare_step(spec, "/out/data", "run.py")["argv"])


def _rows(preset="smoke", backend="fsdp", layout="disaggregated", verl_tokens=()):
    miles, verl, prepare = (list(x) for x in _launches(preset, backend, layout))
    keys = {t.partition("=")[0].lstrip("+") for t in verl_tokens}
    verl = [t for t in verl if t.partition("=")[0].lstrip("+") not in keys] + list(verl_tokens)
    candidate = ParitySide(registry.get("miles"), miles)
    reference = ParitySide(registry.get("verl"), verl, prepare)
    return {r.knob: r for r in build_parity(candidate, reference, backend, layout)}


def _function(verl_root, relative: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((verl_root / "verl" / relative).read_text(encoding="utf-8"))
    found = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    assert found, f"{name} not in VERL's {relative}"
    return found[0]


def _calls(node: ast.AST) -> list[str]:
    return [n.func.attr for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]


class TestKvPool:
    @pytest.mark.parametrize("preset", preset_names())
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_verl_frees_its_engine_only_when_colocated(self, verl_root, preset, backend, layout):
        """VERL's composed config: free_cache_engine only where SGLang shares the GPUs with training."""
        cfg = compose_overrides(overrides_of(list(_launches(preset, backend, layout)[1])), verl_root)
        assert OmegaConf.select(cfg, FREE_CACHE) is (layout == "colocate")
        release = _rows(preset, backend, layout)["rollout_memory_release"]
        # colocated, VERL's hybrid server also copies its weights to CPU (test_verl_sglang_server.py): declared
        assert release.status == ("asymmetry" if layout == "colocate" else "matched")

    def test_without_free_cache_engine_verls_standalone_server_keeps_the_pool(self, verl_root):
        """VERL's SGLang server returns before releasing or re-allocating the KV pool when free_cache_engine is off;
        the radix cache is still flushed after the weights change (no stale KV is reused)."""
        server = "workers/rollout/sglang_rollout/async_sglang_server.py"
        for name in ("release_kv_cache", "resume_kv_cache"):
            guard = _function(verl_root, server, name).body[1]
            assert isinstance(guard, ast.If) and isinstance(guard.body[0], ast.Return)
            assert "free_cache_engine" in ast.unparse(guard.test) and "not" in ast.unparse(guard.test)
        update = _function(verl_root, "workers/rollout/sglang_rollout/sglang_rollout.py", "update_weights")
        assert "flush_cache" in _calls(update)

    def test_a_kv_pool_released_at_every_update_is_caught(self):
        with pytest.raises(ParityError, match="rollout_memory_release: miles='kept' verl='KV pool released"):
            _rows(verl_tokens=(f"{FREE_CACHE}=True",))


class TestOldPolicyWeights:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_verls_weight_swaps_are_declared_in_the_disaggregated_pair(self, backend):
        row = _rows("qwen3-4b", backend)["weight_cpu_backup"]
        assert row.status == "asymmetry" and row.candidate == "none"
        assert row.reference.startswith("training model copied to CPU 4x and back 6x") and "old log-probs" in row.note

    def test_the_count_follows_the_mini_batches_and_bypass_mode_removes_it(self, verl_root):
        """VERL's _compute_old_log_prob saves and restores the model through CPU unless bypass_mode is on."""
        code = _function(verl_root, "trainer/ppo/v1/trainer_separate_async.py", "_compute_old_log_prob")
        calls = _calls(code)
        assert calls.count("save_model_to_cpu") == 2 and calls.count("restore_model_from_cpu") == 2
        assert "bypass_mode" in ast.unparse(code)
        verl = list(_launches("smoke", "fsdp", "disaggregated")[1])
        assert parse_verl(verl)["weight_cpu_backup"].startswith("training model copied to CPU 1x and back 0x")
        assert parse_verl(verl + ["algorithm.rollout_correction.bypass_mode=True"])["weight_cpu_backup"] == "none"

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_colocated_fsdp_and_synchronous_verl_copy_nothing(self, backend):
        row = _rows("qwen3-4b", backend, "colocate")["weight_cpu_backup"]
        assert row.reference == "none"
        assert row.status == ("matched" if backend == "fsdp" else "asymmetry")


PREFILL_OFF = f"{AR}.rollout.engine_kwargs.sglang.disable_piecewise_cuda_graph"


class TestRolloutEngine:
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_prefill_graphs_matched_colocated_and_both_backends_named_disaggregated(self, backend, layout):
        rows = _rows("qwen3-4b", backend, layout)
        prefill = rows["prefill_cuda_graphs"]
        if layout == "colocate":
            assert (prefill.status, prefill.candidate, prefill.reference) == ("matched", "off", "off")
            assert prefill.candidate_launch == "--colocate"
            assert prefill.reference_launch == f"{AR}.rollout.enforce_eager=False +{PREFILL_OFF}=True"
        else:
            assert prefill.status == "asymmetry" and prefill.candidate == "breakable (sglang 0.5.16 default)"
            assert prefill.reference == "piecewise (sglang 0.5.12 default)"
            assert "breakable" in prefill.note and "piecewise" in prefill.note
        version = rows["rollout_engine_version"]
        assert version.status == "asymmetry" and "0.5.16" in version.candidate and "0.5.12" in version.reference

    @pytest.mark.parametrize("preset", preset_names())
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_verls_composed_config_carries_the_prefill_switch_only_colocated(self, verl_root, preset, backend, layout):
        """VERL's strict Hydra composition keeps the key under rollout.engine_kwargs.sglang, which its SGLang server
        unpacks into ServerArgs (test below); VERL's own checks run on every cell in test_verl_own_checks."""
        cfg = compose_overrides(overrides_of(list(_launches(preset, backend, layout)[1])), verl_root)
        assert OmegaConf.select(cfg, PREFILL_OFF) is (True if layout == "colocate" else None)

    def test_verls_server_hands_engine_kwargs_to_server_args(self, verl_root):
        """launch_server builds ServerArgs from a dict ending in **engine_kwargs (the sglang sub-dict of the config),
        so the switch reaches SGLang as a ServerArgs field, after VERL's own disable_cuda_graph=enforce_eager."""
        launch = _function(verl_root, "workers/rollout/sglang_rollout/async_sglang_server.py", "launch_server")
        args = next(
            n.value for n in ast.walk(launch) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "args"
        )
        assert isinstance(args, ast.Dict) and ast.unparse(args.values[-1]) == "engine_kwargs" and args.keys[-1] is None
        assert "disable_cuda_graph" in [k.value for k in args.keys if isinstance(k, ast.Constant)]
        source = ast.unparse(launch)
        assert "self.config.get('engine_kwargs', {}).get('sglang', {})" in source and "ServerArgs(**args" in source

    def test_fa3_on_verls_sglang_is_a_warned_risk_and_flashinfer_plans_clean(self, tmp_path):
        """VERL 0.9.1 runs flashinfer on SGLang >= 0.5.12 (FA3 CUDA-graph capture broken there), the cells pass the
        spec's fa3 over it (test_verl_sglang_server.py): the dry run says so; flashinfer on both sides does not."""
        from scripts.benchmark.plan.build import PlanOptions, build_plan

        def planned(backend_name: str):
            data = load_preset("qwen3-4b").model_dump(mode="json")
            data["rollout"]["attention_backend"] = backend_name
            sides = registry.option_pair(compare_verl=True, miles_version=None)
            options = PlanOptions(BACKENDS, "colocate", tmp_path / backend_name, sides)
            return build_plan(BenchmarkSpec.model_validate(data), None, options).data

        (risk,) = [w for w in planned("fa3")["warnings"] if "attention_backend" in w]
        assert "VERL's SGLang 0.5.12" in risk and "sglang#22800" in risk and "flashinfer" in risk
        clean = planned("flashinfer")
        assert not [w for w in clean["warnings"] if "attention_backend" in w]
        for cell in clean["cells"]:
            words = " ".join(cell["argv"])
            assert "--sglang-attention-backend flashinfer" in words or "sglang.attention_backend=flashinfer" in words

    def test_the_switch_is_spelled_for_verls_sglang(self):
        spec = with_overrides(load_preset("smoke"), layout="colocate")
        data = spec.model_dump()
        data["rollout"]["sglang_versions"]["verl"] = "0.5.16"
        newer = BenchmarkSpec.model_validate(data)
        argv = build_verl_launch(newer, "fsdp", "colocate", VerlData("/d/t.parquet", "/d/v.parquet")).argv
        assert f"+{AR}.rollout.engine_kwargs.sglang.disable_prefill_cuda_graph=True" in argv
        assert parse_verl(argv)["prefill_cuda_graphs"] == "off"
        assert parse_verl(list(_launches("smoke", "fsdp", "colocate")[1]))["prefill_cuda_graphs"] == "off"

    def test_miles_prefill_choice_follows_its_flag(self):
        """The flag exists for the default target with no default: --colocate is what turns the graphs off."""
        inventory = load_inventory()
        assert flag_default(inventory, "megatron", "--sglang-cuda-graph-backend-prefill") is None
        miles = list(_launches("smoke", "megatron", "colocate")[0])
        explicit = miles + ["--sglang-cuda-graph-backend-prefill", "tc_piecewise"]
        assert (
            parse_miles(explicit, "megatron", inventory)["prefill_cuda_graphs"] == "tc_piecewise (set by the launch)"
        )


class TestLoop:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_loop_shape_and_first_steps_say_how_they_differ(self, backend):
        rows = _rows("qwen3-4b", backend)
        shape, first = rows["loop_shape"], rows["first_steps_composition"]
        assert shape.status == "asymmetry" and "drained" in shape.candidate and "2 batches" in shape.reference
        assert first.status == "asymmetry" and first.candidate == "file batches in order"
        assert "fastest" in first.reference and "1 batch extra" in first.reference
        assert "abort" in rows["partial_rollout"].reference and "re-prefill" in rows["partial_rollout"].note

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_colocated_loops_are_matched(self, backend):
        rows = _rows("qwen3-4b", backend, "colocate")
        for knob in ("loop_shape", "first_steps_composition"):
            assert rows[knob].status == "matched", knob


class TestPhaseMap:
    """The report attributes the step-time gap only to phases both frameworks measure the same way in the layout."""

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_old_logprob_gap_is_attributed_only_where_comparable(self, tmp_path, layout):
        run_dir = write_run_folder(tmp_path, gap_pair({"old_logprob": 10.0}, layout=layout, num_steps=80))
        doc = analyse_run_folder(run_dir, AnalysisSettings(reps=200))
        rows = {a.component: a for a in doc.attribution}
        old, rest = rows["phases_s.old_logprob"], rows["unattributed"]
        assert old.gap_s == pytest.approx(10.0, abs=1.0)
        if layout == "colocate":
            assert old.comparable and old.share_of_gap > 0.8 and abs(rest.gap_s) < 1.0
            assert main_component(doc, "fsdp", layout).startswith("mostly in old_logprob")
            return
        assert not old.comparable and old.share_of_gap is None and old.note.startswith("not comparable: ")
        assert {a.component for a in doc.attribution if not a.comparable} == {
            f"phases_s.{p}" for p in ("rollout_wait", "old_logprob", "weight_sync")
        }
        assert rest.gap_s == pytest.approx(10.0, abs=1.0)
        # "in ..., offset by" where the noise of the other phases went against the gap
        assert main_component(doc, "fsdp", layout).startswith(("mostly in unattributed time", "in unattributed time"))


class TestFirstSteps:
    """Where the parity table declares that the first steps train different prompts, the report never keeps them."""

    def _report(self, tmp_path, layout: str, skip_warmup: bool = True):
        cells = gap_pair({}, layout=layout, num_steps=40)
        for cell in cells:
            cell.warmup_steps = 0 if skip_warmup else cell.warmup_steps
        rows = list(_rows("smoke", "fsdp", layout).values())
        pair = ParityPair(
            backend="fsdp",
            layout=layout,
            candidate_cell=f"miles-fsdp-{layout}",
            reference_cell=f"verl-fsdp-{layout}",
            rows=rows,
        )
        parity = json.loads(parity_text(parity_file("0123456789ab", [pair])))
        run_dir = write_run_folder(tmp_path, cells, parity=parity)
        return {c.id: c.steady_state for c in analyse_run_folder(run_dir, AnalysisSettings(reps=100)).cells}

    def test_disaggregated_runs_drop_the_reordered_first_steps(self, tmp_path):
        for cell_id, steady in self._report(tmp_path, "disaggregated").items():
            assert steady.repeats[0].start_index == 2, cell_id
            assert "first 2 steps cut" in steady.repeats[0].method

    def test_colocated_runs_keep_them(self, tmp_path):
        for cell_id, steady in self._report(tmp_path, "colocate").items():
            assert steady.repeats[0].start_index == 0, cell_id

    def test_a_longer_warm_up_is_left_as_found(self, tmp_path):
        for steady in self._report(tmp_path, "disaggregated", skip_warmup=False).values():
            assert steady.repeats[0].start_index >= 5 and "cut" not in steady.repeats[0].method


def test_the_policy_lag_row_says_it_is_the_launch_bound():
    row = _rows("qwen3-4b", "megatron")["max_policy_lag"]
    assert row.status == "matched" and row.candidate == row.reference == 1
    assert row.note == "the bound the launches set; the lag the runs log is in the report's policy_lag"


def _continuous(preset: str = "smoke"):
    data = with_overrides(load_preset(preset), layout="disaggregated").model_dump()
    data["placement"]["async_loop"]["schedule"] = "continuous"
    return BenchmarkSpec.model_validate(data)


def _continuous_rows(preset: str, backend: str):
    spec = _continuous(preset)
    train, val = converted_paths(spec, "/out/data")
    miles = build_miles_launch(spec, backend, "disaggregated").argv
    verl = build_verl_launch(spec, backend, "disaggregated", VerlData(train, val)).argv
    prepare = prepare_step(spec, "/out/data", "run.py")["argv"]
    candidate, reference = ParitySide(registry.get("miles"), miles), ParitySide(registry.get("verl"), verl, prepare)
    return miles, verl, {r.knob: r for r in build_parity(candidate, reference, backend, "disaggregated")}


class TestContinuousSchedule:
    """placement.async_loop.schedule: continuous runs Miles's fully-async loop against the same VERL launch."""

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_miles_runs_fully_async_with_retract_and_the_lag_bound(self, backend):
        miles, verl, _ = _continuous_rows("qwen3-4b", backend)
        drain_miles, drain_verl, _ = _launches("qwen3-4b", backend, "disaggregated")
        tail = ["--fully-async", "--pause-generation-mode", "retract", "--max-weight-staleness", "0"]
        assert miles[-len(tail) :] == tail and miles[: -len(tail)] == list(drain_miles)
        assert miles[1].endswith("/train_async.py") and verl == list(drain_verl)
        assert not {t for t in tail if t.startswith("--")} & set(drain_miles)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_parity_matches_the_loop_and_names_what_still_differs(self, backend):
        _, _, rows = _continuous_rows("qwen3-4b", backend)
        assert not [r.knob for r in rows.values() if r.status == "MISMATCH"]
        for knob in ("rollout_loop", "weight_sync_cadence"):
            assert rows[knob].status == "matched", knob
        lag = rows["max_policy_lag"]
        assert lag.status == "asymmetry" and lag.reference == 1
        assert lag.candidate.startswith("1 by the weight version a sample finished under")
        assert "oldest weights a trajectory used" in lag.note and "one version staler" in lag.note
        shape, partial = rows["loop_shape"], rows["partial_rollout"]
        assert shape.status == "asymmetry" and "refilled one group at a time" in shape.candidate
        assert "up to 2 batches of finished groups buffered (3 generated ahead of training)" in shape.candidate
        assert "in flight through the update" in shape.candidate and "in flight through the update" in shape.reference
        assert "drops groups staler than the bound" in shape.note and "nothing dropped" in shape.note
        assert partial.status == "asymmetry" and "retracted" in partial.candidate and "abort" in partial.reference
        first = rows["first_steps_composition"]
        assert first.status == "asymmetry" and "at every step" in first.candidate
        assert "different prompts at every step, not only the first two" in first.note

    def test_the_drain_default_keeps_the_hash_and_continuous_changes_it(self):
        spec = with_overrides(load_preset("smoke"), layout="disaggregated")
        data = spec.model_dump()
        data["placement"]["async_loop"].pop("schedule")
        assert spec_hash(BenchmarkSpec.model_validate(data)) == spec_hash(spec)
        assert spec_json(spec)["placement"]["async_loop"]["schedule"] == "drain"
        assert spec_hash(_continuous()) != spec_hash(spec)

    def test_a_continuous_spec_plans_the_fully_async_loop_disaggregated_and_is_refused_colocated(self, tmp_path):
        """The schedule is the disaggregated loop's: a spec that asks for it while the plan is colocated is refused
        (exit 2, nothing written) rather than planned as drain under a hash that says continuous."""
        from scripts.benchmark.run import build_app
        from typer.testing import CliRunner

        data = load_preset("smoke").model_dump(mode="json")
        data["placement"]["async_loop"]["schedule"] = "continuous"
        spec = tmp_path / "spec.yaml"
        spec.write_text(json.dumps(data))
        base = ["--spec", str(spec), "--compare-verl", "--backend", "fsdp", "--dry-run"]
        refused = CliRunner().invoke(build_app(), [*base, "--output-dir", str(tmp_path / "colocated")])
        assert refused.exit_code == 2 and "placement.async_loop.schedule" in refused.output
        assert not (tmp_path / "colocated").exists()
        planned = CliRunner().invoke(
            build_app(), [*base, "--layout", "disaggregated", "--output-dir", str(tmp_path / "disaggregated")]
        )
        assert planned.exit_code == 0, planned.output
        plan = json.loads((tmp_path / "disaggregated" / "plan.json").read_text())
        (miles,) = [c for c in plan["cells"] if c["framework"] == "miles"]
        assert "--fully-async" in miles["argv"] and plan["spec"]["placement"]["async_loop"]["schedule"] == "continuous"

    def test_a_schedule_neither_framework_runs_is_refused(self):
        data = load_preset("smoke").model_dump()
        data["placement"]["async_loop"]["schedule"] = "fully-async"
        with pytest.raises(ValueError, match="schedule"):
            BenchmarkSpec.model_validate(data)
