"""Config layering: config/paper.yaml gives the paper's analysis, never the CPU default's.

The schema's defaults are the paper's values; config/config.yaml (the CPU default) is read only
when no --configfile is given. The effective config is read back from what Snakemake itself
resolved and wrote (results/<run>/config.yaml, target run_config), not recomputed here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake

PAPER = REPO / "config" / "paper.yaml"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
COARSE_ACCOUNTING = REPO / "tests" / "configs" / "paper-coarse-accounting.yaml"

# The paper's value of every key of the `training`, `fit`, `accounting` (with `table`) and
# `analysis` blocks, listed once, with where in the paper (McKenna et al. 2025) it comes from.
# NOT_STATED marks keys the paper leaves open (resources, numerics, our table's precision):
# those must equal the schema's documented default. A key added to one of these blocks fails
# test_every_paper_block_key_is_listed until it is listed here.
NOT_STATED = "not stated by the paper"
PAPER_VALUES: dict[str, tuple[Any, str]] = {
    # §3.2 "Learning Rates", "Optimizer"; §3.3 "Scaling Law Fitting" (σ̄ ∈ [0.5^23, 0.5^6], plus 0).
    "training.noise_batch_ratios": ([0.0, *(2.0**-k for k in range(6, 24))], "§3.3: 18 NBRs 0.5^6..0.5^23 and non-private"),
    "training.learning_rates": ([2.0**-7, 2.0**-8, 2.0**-9], "§3.2 Learning Rates"),
    "training.physical_batch": (1024, "§3.3 step 1: 10 x 100 x 1024 examples"),
    "training.steps": (128_000, "§3.2 Optimizer: horizon of 128K iterations"),
    "training.warmup_steps": (1000, "§3.2 Optimizer: 1000 steps of warm-up"),
    "training.decay_steps": (128_000, "§3.2 Optimizer: decay over 128K iterations"),
    "training.decay_factor": (10.0, "§3.2 Optimizer: by a factor of 10x"),
    "training.schedule": ("paper", "§3.2 Optimizer: warm-up, then exponential decay over the horizon"),
    "training.cooldown_fraction": (0.2, NOT_STATED + " (only constant_cooldown, not the paper's, reads it)"),
    "training.examples_per_user_per_batch": (1, NOT_STATED + " (only a user-level sampler reads it; the paper protects "
                                                "sequences)"),
    "training.log_every": (100, "§3.3: 1280 iterations logged, each a mean over 100 x 1024 examples"),
    "training.clip_norm": (1.0, "§3.2 Optimizer: l2 clip norm 1.0"),
    "training.mask_rate": (0.15, "§3.2: the default BERT recipe (Devlin et al.): 15% masked"),
    "training.seed": (0, NOT_STATED),
    "training.checkpoint_every": (1000, NOT_STATED),
    "training.microbatch_size": (None, NOT_STATED + " (memory only: whole batch)"),
    "training.scan_layers": (True, NOT_STATED + " (how the step runs: the same curve, compiled once per layer shape)"),
    "training.remat": (False, NOT_STATED + " (memory only)"),
    "training.skip_padding": (True, NOT_STATED + " (how a padded step runs: the same curve, bit for bit)"),
    "training.clipping": ("vmap", NOT_STATED + " (same clipped sum either way)"),
    "training.adam_b1": (0.9, NOT_STATED + " (optax's default)"),
    "training.adam_b2": (0.999, NOT_STATED + " (optax's default)"),
    "training.adam_eps": (1e-8, NOT_STATED + " (optax's default)"),
    "training.sampling": ("shuffle", "§3.1: the grid's runs are accounted post hoc through the NBR (study mode)"),
    "training.truncated_batch_size": (None, NOT_STATED + " (private training only)"),
    "training.accountant": (None, NOT_STATED + " (private training only: the sampler's own)"),
    "training.mechanisms": (["dpsgd"], "§2 Algorithm 1: DP-SGD's independent noise (correlated noise is its open question)"),
    "training.mechanism_learning_rates": ({}, "§3.2 Learning Rates: one grid of rates (a mechanism's own is not the paper's)"),
    "training.bandmf_strategy": ("mean_error", NOT_STATED + " (BandMF only: jax-privacy's default)"),
    "training.output_bias": ("zeros", NOT_STATED + " (BERT's own initialisation starts the MLM output bias at zero)"),
    "training.allow_repeats": (False, "§3.2 Metrics: less than a single epoch, so training loss estimates evaluation loss"),
    "training.repeat_seeds": ([], "the paper trains one seed per grid point and reports no intervals"),
    "training.repeat_points": ([], "the paper trains one seed per grid point and reports no intervals"),
    "training.seq_lens": (None, "§3.2: S = 512 only (null = [data.seq_len]); the limitations name S as a knob"),
    "training.runs_per_job": ("one", NOT_STATED + " (how jobs are dispatched, not what they compute)"),
    # §3.3 "Data Cleaning and Smoothing", "Training Step Extrapolation"; Fig. compute_allocation caption.
    "fit.reference_compatible": (False, "paper mode: the paper's text, not the authors' code"),
    "fit.near_optimal_tolerance": (0.01, "fig:compute_allocation_selection: within 1% of optimal"),
    "fit.rolling_window": (10, "§3.3 step 1: rolling average over the 10 previous measurements"),
    "fit.warmup_steps": (None, NOT_STATED + " (null = training.warmup_steps, as the authors' code drops T < 1000)"),
    "fit.extrapolation_window": ({"start": 0.125, "end": 1.0, "unit": "fraction"},
                                 "§3.3 Extrapolation: fitted on iterations 16K to 128K"),
    "fit.extension_doublings": (6, "§3.3: beyond 128K; the candidates' T reaches 8.192M = 128K x 2^6"),
    "fit.parametric": (True, "appendix Parametric Scaling Laws"),
    "fit.smooth_nonprivate_along_nbr": (False, "§3.3 step 2: isotonic along NBR over the 18 noisy values"),
    "fit.extrapolation_asymptote": ("per_curve", "§3.3: we independently fit a function for each model size and NBR"),
    "fit.isotonic_skip_nan": (True, NOT_STATED + " (the authors' code lets NaNs break monotonicity)"),
    "fit.interpolate_log_loss": (False, "§3.3 Scaling Law Fitting: F(log M, log T, log NBR) = L, not log L"),
    "fit.fill_missing_nbr": ("log_nbr", NOT_STATED + " (the authors' code: positional)"),
    "fit.ignore_zero_weight_nan": (False, NOT_STATED + " (the authors' code: scipy's interpolant, NaN at any weight)"),
    "fit.bootstrap": ({"replicates": 20, "chunk_size": 5, "seed": 0},
                      NOT_STATED + " (intervals, docs/fit.md; planned only where seeds are repeated)"),
    "fit.validation": ({"replicates": 20, "interval_scale": "distance"},
                       NOT_STATED + " (interval coverage on held-out sets, docs/fit.md)"),
    "fit.physical_batch_correction": ({"enabled": False, "physical_batch": 256, "points": []},
                                      "the paper's law depends on sigma-bar alone (an extension, off)"),
    # §2 Privacy Budget; appendix "Notes on Generalized DP-SGD", Minibatch Selection.
    "accounting.delta": (1e-8, "§2: delta = 1e-8"),
    "accounting.sampling": ("min", "appendix Minibatch Selection: the lower of Poisson and deterministic"),
    "accounting.check_points": (30, NOT_STATED),
    "accounting.table.epsilon_min": (2.0**-8, "an octave below the smallest epsilon queried (2^0 figures, 2^-2 vector fields)"),
    "accounting.table.epsilon_max": (2.0**20, "fig:token_model_ratios queries epsilon up to 1e6"),
    "accounting.table.steps_min": (100, "the authors' table: T from 100"),
    "accounting.table.steps_max": (128_000, "the authors' table: T to 128K (Table 2's iterations are all below)"),
    "accounting.table.q_min_log2": (-20, "the authors' table: q from 2^-20"),
    "accounting.table.epsilon_per_octave": (4, NOT_STATED + " (precision of our table)"),
    "accounting.table.steps_per_octave": (1, NOT_STATED + " (precision of our table)"),
    "accounting.table.q_per_octave": (1, NOT_STATED + " (the authors' table: q at factors of 2)"),
    "accounting.table.accountant": ("pld", "§3.4: dp-accounting's tight accountant"),
    "accounting.table.sigma_per_octave": (2, NOT_STATED + " (precision of our table)"),
    "accounting.table.discretisation_fraction": (0.1, NOT_STATED + " (precision of our table)"),
    "accounting.table.max_points": (2_000_000, NOT_STATED + " (cost cap of our table)"),
    "accounting.table.q_per_chunk": (1, NOT_STATED + " (jobs, not values)"),
    # §4 figures and appendix tables (captions; the authors' notebook for what captions leave out).
    "analysis.compute_min": (None, "from the law: smallest model x 1000 steps x 1024 ... (authors' notebook)"),
    "analysis.compute_max": (None, "from the law: largest model x 128K steps x 2^20 (authors' notebook)"),
    "analysis.compute_count": (60, NOT_STATED + " (the authors' notebook uses 100)"),
    "analysis.allocation_data_budget": (1e8, "fig:compute_allocation_selection: data budget 10^8"),
    "analysis.data_budgets": ([1e6, 1e7, 1e8, 1e9], "fig:optimal_allocation_extended: N = 10^6..10^9"),
    "analysis.privacy_budgets": ([1.0, 4.0, 16.0, 64.0], "fig:compute_allocation_selection, table:inflection_points"),
    "analysis.vary_compute_privacy_budgets": ([1.0, 8.0], "fig:vary_compute_and_privacy: epsilon = 1 and 8"),
    "analysis.token_ratio_data_budget": (1e7, "fig:token_model_ratios (authors' notebook: N = 1e7)"),
    "analysis.token_ratio_privacy_budgets": ([10.0**k for k in range(7)], "fig:token_model_ratios: 10^0..10^6"),
    "analysis.table_data_budgets": ([1e5, 1e6, 1e7, 1e8, 1e9], "table:inflection_points: N = 10^5..10^9"),
    "analysis.grid_privacy_budget": (4.0, "fig:full_grid: bold default epsilon = 4"),
    "analysis.grid_data_budget": (1e7, "fig:full_grid: bold default N = 10^7"),
    "analysis.grid_compute": (1e19, "fig:full_grid: bold default C = 10^19"),
    "analysis.grid_compute_budgets": ([1e17, 1e19, 1e21, 1e23], "fig:full_grid: C = 10^17..10^23"),
    "analysis.baseline_compute": (1e19, "fig:baseline_compare: C = 10^19"),
    "analysis.baseline_reduced_compute": (2e18, "fig:baseline_compare: compute-optimal at 2 x 10^18"),
    "analysis.baseline_data_budget": (1e7, "fig:baseline_compare: N = 10^7"),
    "analysis.baseline_privacy_budgets": ([2.0**k for k in range(14)], "fig:baseline_compare: epsilon = 2^0..2^13"),
    "analysis.baselines": ([{"model": "BertLarge", "iterations": 7500}, {"model": "BertMedium", "iterations": 5000},
                            {"model": "BertTiny", "iterations": 2500}], "fig:baseline_compare's three baselines"),
    "analysis.vector_iterations": (16000, "§4.5: we fix T = 16000"),
    "analysis.vector_data_budget": (2.0**24, "fig:accounting_privacy_vs_compute: N = 2^24"),
    "analysis.vector_privacy_budget": (4.0, "fig:accounting_data_vs_compute: epsilon = 4"),
    "analysis.vector_batch_size": (65536, "fig:accounting_data_vs_privacy: B = 65536"),
    "analysis.vector_log2_batch_range": ([10, 20], "fig:vector_fields axes (authors' notebook)"),
    "analysis.vector_log2_data_range": ([20, 30], "fig:vector_fields axes (authors' notebook)"),
    "analysis.vector_log2_epsilon_range": ([-2, 6], "fig:vector_fields axes (authors' notebook)"),
    "analysis.vulnerability_privacy_budget": (8.0, "fig:excess-vulnerability: (8, 1e-8)"),
    "analysis.vulnerability_data_budget": (1e7, NOT_STATED + " (the N = 1e7 of the other figures)"),
    "analysis.vulnerability_panels": ([{"compute": 6e17, "model_size": 4e6}, {"compute": 6.3e19, "model_size": 2e8},
                                      {"compute": 2.5e20, "model_size": 2e8}], "fig:excess-vulnerability's three panels"),
    "analysis.vulnerability_batch_count": (16, NOT_STATED),
    "analysis.smoothing_model": (None, "fig:smoothing: BertTiny (null = the smallest model)"),
    "analysis.smoothing_noise_batch_ratio": (2.0**-15, "fig:smoothing (a): NBR = 0.5^15"),
    "analysis.smoothing_iterations": (32000, "fig:smoothing (b): T = 32000"),
    "analysis.training_models": (["BertTiny", "BertMedium"], "fig:training: BertTiny (top), BertMedium (bottom)"),
    "analysis.training_noise_batch_ratios": ([2.0**-20, 2.0**-15, 2.0**-10], "fig:training (authors' notebook)"),
    "analysis.parametric_noise_batch_ratios": ([2.0**-20, 2.0**-15, 2.0**-10, 2.0**-6],
                                               "fig:parametric-scaling-optimal-model-size"),
    "analysis.privacy_unit": ("sequence", NOT_STATED + " (its grid's unit is one sequence; appendix 'Data budget "
                                                       "and epochs' reads the method as user-level)"),
    "analysis.seq_len_tokens": (None, NOT_STATED + " (null = allocation_data_budget x data.seq_len tokens)"),
    "analysis.seq_len_users": (None, NOT_STATED + " (null = allocation_data_budget users)"),
    "analysis.seq_len_privacy_budgets": ([1.0, 8.0], NOT_STATED + " (fig:vary_compute_and_privacy's epsilons)"),
    "analysis.user_level_privacy_budgets": ([1.0, 4.0, 16.0], NOT_STATED + " (the paper protects sequences)"),
    "analysis.user_level_compute_count": (5, NOT_STATED + " (the paper protects sequences)"),
}
BLOCKS = ("training", "fit", "accounting", "analysis")


def lookup(config: dict, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value[part]
    return value


def same(actual: Any, expected: Any) -> bool:
    """Equal, with floats compared to 1e-12 relative (YAML round trips of 2^-k)."""
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        return math.isclose(actual, expected, rel_tol=1e-12)
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(same, actual, expected))
    if isinstance(expected, dict):
        return isinstance(actual, dict) and actual.keys() == expected.keys() and all(
            same(actual[k], expected[k]) for k in expected)
    return actual == expected and type(actual) is type(expected)


def plain(value: Any) -> Any:
    """Tuples as lists, recursively (the library's dataclasses hold tuples; YAML has lists)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def effective_config(workdir: Path, *configfiles: Path, overrides: tuple[str, ...] = ()) -> dict:
    """The config Snakemake resolved for these --configfiles, as the run_config target wrote it."""
    args = ["run_config", "--cores", "1"]
    if configfiles:
        args += ["--configfile", *map(str, configfiles)]
    if overrides:
        args += ["--config", *overrides]
    run_snakemake(*args, cwd=workdir)
    (written,) = (workdir / "results").glob("*/config.yaml")
    return yaml.safe_load(written.read_text())


def schema_keys(block: str) -> set[str]:
    """Every leaf key of a schema block, dotted (the nested fit.extrapolation_window is one value)."""
    properties = yaml.safe_load(SCHEMA.read_text())["properties"][block]["properties"]
    keys = set()
    for name, spec in properties.items():
        if name == "table":
            keys |= {f"{block}.table.{sub}" for sub in spec["properties"]}
        else:
            keys.add(f"{block}.{name}")
    return keys


@pytest.fixture(scope="module")
def paper_config(tmp_path_factory) -> dict:
    return effective_config(tmp_path_factory.mktemp("paper"), PAPER)


def test_every_paper_block_key_is_listed() -> None:
    listed = set(PAPER_VALUES)
    for block in BLOCKS:
        missing = schema_keys(block) - listed
        assert not missing, f"list the paper's value (or {NOT_STATED!r}) of {sorted(missing)}"
    assert listed <= set().union(*map(schema_keys, BLOCKS))


@pytest.mark.parametrize("key", sorted(PAPER_VALUES))
def test_paper_config_resolves_to_the_papers_values(paper_config: dict, key: str) -> None:
    expected, source = PAPER_VALUES[key]
    actual = lookup(paper_config, key)
    assert same(actual, expected), f"{key} = {actual!r}, the paper's is {expected!r} ({source})"


def test_a_config_layered_on_paper_keeps_the_papers_values_for_what_it_does_not_set(tmp_path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("run_name: mine\nanalysis:\n  privacy_budgets: [2.0, 8.0]\nfit:\n  rolling_window: 5\n")
    config = effective_config(tmp_path, PAPER, mine)
    assert config["run_name"] == "mine"
    assert config["analysis"]["privacy_budgets"] == [2.0, 8.0] and config["fit"]["rolling_window"] == 5
    for key, (expected, source) in PAPER_VALUES.items():
        if key not in ("analysis.privacy_budgets", "fit.rolling_window"):
            assert same(lookup(config, key), expected), f"{key} leaked ({source})"
    assert config["models"]["names"] == ["BertTiny", "BertMini", "BertSmall", "BertMedium", "BertBase", "BertLarge"]
    assert config["data"]["seq_len"] == 512


def test_without_a_configfile_the_cpu_default_is_used(tmp_path) -> None:
    config = effective_config(tmp_path, overrides=("run_name=cpu",))
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert config["run_name"] == "cpu"
    assert config["fit"]["rolling_window"] == default["fit"]["rolling_window"] != 10
    assert config["accounting"]["table"]["steps_max"] == default["accounting"]["table"]["steps_max"] != 128_000
    assert config["analysis"]["data_budgets"] == default["analysis"]["data_budgets"]
    # and keys the CPU default leaves unset take the paper's values
    assert config["analysis"]["vulnerability_batch_count"] == 16


def test_schema_defaults_are_the_librarys_defaults() -> None:
    """The workflow and the library (dpscaling CLI, notebooks) share one set of paper defaults."""
    from dataclasses import asdict

    from dpscaling.accounting.table_spec import TableSpec
    from dpscaling.report.figures.settings import AnalysisSettings

    properties = yaml.safe_load(SCHEMA.read_text())["properties"]
    analysis = {k: v["default"] for k, v in properties["analysis"]["properties"].items()}
    library = {k: v for k, v in asdict(AnalysisSettings()).items() if k != "near_optimal_tolerance"}
    assert analysis.keys() == library.keys()
    for key, value in library.items():
        assert same(analysis[key], plain(value)), key
    table = {k: v["default"] for k, v in properties["accounting"]["properties"]["table"]["properties"].items()}
    spec = TableSpec().to_mapping()
    assert table == {k: v for k, v in spec.items() if k != "delta"}
    assert properties["accounting"]["properties"]["delta"]["default"] == spec["delta"]


def paper(key: str) -> set:
    return set(PAPER_VALUES[f"analysis.{key}"][0])


# The budgets each figure is drawn at in the paper: (data budgets, privacy budgets), from PAPER_VALUES.
FIGURE_BUDGETS = {
    "fig-compute_allocation_selection": ({1e8}, paper("privacy_budgets")),
    "fig-optimal_allocation_extended": (paper("data_budgets"), paper("privacy_budgets")),
    "fig-vary_compute_and_privacy": (paper("data_budgets"), paper("vary_compute_privacy_budgets")),
    "fig-token_model_ratios": ({1e7}, paper("token_ratio_privacy_budgets") | {math.inf}),
    "fig-full_grid": (paper("data_budgets"), paper("privacy_budgets")),
    "fig-baseline_compare": ({1e7}, paper("baseline_privacy_budgets")),
    "fig-excess-vulnerability": ({1e7}, {8.0}),
    "fig-vector_fields": ({2.0**k for k in range(20, 31)}, {2.0**k for k in range(-2, 7)}),
}


@pytest.mark.slow(minutes=5)
def test_paper_config_on_the_authors_results_csv_draws_every_figure_at_the_papers_budgets(tmp_path) -> None:
    """`figures tables findings` with config/paper.yaml on a results.csv in the authors' format
    (synthetic, the paper's whole grid), with a coarse sigma table over the paper's range."""
    import json

    from dpscaling.report.figures import FIGURES
    from dpscaling.law.synthetic import paper_reference_results

    csv = tmp_path / "results.csv"
    paper_reference_results(log_every=400).to_csv(csv, index=False)
    run_snakemake("figures", "tables", "findings", "--cores", "2", "--configfile", str(PAPER), str(COARSE_ACCOUNTING),
                  "--config", f"results_csv={csv}", cwd=tmp_path, timeout=1500)
    run = tmp_path / "results" / "paper-csv"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["fit"]["rolling_window"] == 10 and config["analysis"]["data_budgets"] == [1e6, 1e7, 1e8, 1e9]
    manifest = json.loads((run / "law" / "fit" / "manifest.json").read_text())
    assert manifest["settings"]["rolling_window"] == 10
    assert not (run / "runs").exists() and not (run / "data").exists()  # nothing was trained
    # Only the law's tables: the models and throughput tables describe training runs there are none of.
    assert sorted(p.name for p in (run / "tables").glob("*.csv")) == ["findings.csv", "table-inflection_points.csv"]
    # A loss figure without this run's data: no unigram floor, and its CSV says why (docs/data.md).
    reproduction = pd.read_csv(run / "figures" / "fig-nonprivate_reproduction.csv")
    assert reproduction["Unigram Floor"].isna().all()
    assert reproduction["Unigram Floor Note"].str.contains("results.csv").all()
    assert set(FIGURE_BUDGETS) <= set(FIGURES)
    for name in FIGURES:
        data = pd.read_csv(run / "figures" / f"{name}.csv")
        assert len(data), name
        if name in FIGURE_BUDGETS:
            data_budgets, privacy_budgets = FIGURE_BUDGETS[name]
            assert set(data["Data Budget"]) == data_budgets, name
            assert set(data["Privacy Budget"]) == privacy_budgets, name
            if "Cross Entropy" in data.columns:  # every (N, epsilon) of the figure is answered somewhere
                answered = data.groupby(["Data Budget", "Privacy Budget"])["Cross Entropy"].count()
                assert (answered > 0).all(), f"{name}: unanswered budgets {list(answered[answered == 0].index)}"
    points = pd.read_csv(run / "tables" / "table-inflection_points.csv")
    assert set(points["Data Budget"]) == paper("table_data_budgets")
    assert set(points["Privacy Budget"]) == paper("privacy_budgets")
    assert points["Cross Entropy"].notna().all()
    findings = pd.read_csv(run / "tables" / "findings.csv")
    assert list(findings["finding"])[:4] == ["a", "b", "c", "d"]
