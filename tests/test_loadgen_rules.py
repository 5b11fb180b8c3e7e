"""The round's rules (runner/loadgen/rules.py): which round the installed LoadGen belongs to,
the scenario sets a system type takes, and the table itself against MLCommons' checker
config and compliance files when a checkout of mlcommons/inference is at hand."""

from __future__ import annotations

import pytest
from mlperf_inference import checker_constants, checkout

from runner.base.errors import RunnerError
from runner.loadgen.conf import AUDIT_CONFIGS, parse_conf_text
from runner.loadgen.rules import ROUNDS, V6_1, check_scenarios, installed_round, round_for_seeds


def test_installed_loadgen_belongs_to_the_round_whose_seeds_it_embeds():
    """LoadGen 6.0.x embeds v6.1's seeds (its own logs show them): that is the round."""
    rules = installed_round()
    assert rules.version == "v6.1"
    with pytest.raises(RunnerError, match="of no MLPerf round"):
        round_for_seeds({"qsl_rng_seed": 1, "sample_index_rng_seed": 2,
                         "schedule_rng_seed": 3}, "9.9.9")


@pytest.mark.parametrize(("system_type", "scenarios", "message"), [
    ("datacenter", ["Offline", "Server"], "takes no stable-diffusion-xl result"),
    ("edge", ["Offline"], "missing SingleStream"),
    ("datacenter,edge", ["SingleStream", "Offline"], "missing Server"),
    ("edge", ["SingleStream", "Offline", "Server"], "Server not accepted"),
])
def test_a_scenario_set_the_round_does_not_take_is_named(system_type, scenarios, message):
    with pytest.raises(RunnerError, match=message):
        check_scenarios(V6_1, system_type, scenarios, "profile: mlperf.system.system_type")


def test_the_scenario_sets_the_round_takes_pass():
    check_scenarios(V6_1, "edge", ["SingleStream", "Offline"], "here")
    check_scenarios(V6_1, "datacenter,edge", ["Server", "SingleStream", "Offline"], "here")


# --- the table against MLCommons' own config (skipped without a checkout) ----------------
SDXL = "stable-diffusion-xl"


@pytest.mark.parametrize("version", sorted(ROUNDS))
def test_rules_table_is_the_checkers(version):
    c = checker_constants()
    cfg = c.MODEL_CONFIG[version]
    rules = ROUNDS[version]
    assert rules.seeds == cfg["seeds"]
    kinds = {"datacenter": "datacenter", "edge": "edge", "datacenter,edge": "datacenter-edge"}
    for system_type, key in kinds.items():
        required = cfg[f"required-scenarios-{key}"].get(SDXL)
        optional = tuple(cfg[f"optional-scenarios-{key}"].get(SDXL, ()))
        if required is None:
            assert system_type not in rules.scenarios
        else:
            assert rules.scenarios[system_type] == (tuple(required), optional)
    tests = tuple(t for t in ("TEST01", "TEST04", "TEST06", "TEST07", "TEST08", "TEST09")
                  if SDXL in cfg.get(f"models_{t}", []))
    assert rules.compliance == tests
    assert rules.system_fields == tuple(c.SYSTEM_DESC_REQUIRED_FIELDS)
    assert rules.meaningful_fields == tuple(c.SYSTEM_DESC_MEANINGFUL_RESPONSE_REQUIRED_FIELDS)
    assert rules.measurement_fields == tuple(c.SYSTEM_IMP_REQUIRED_FILES)
    assert rules.performance_sample_count == cfg["performance-sample-count"][SDXL]
    assert rules.dataset_size == cfg["dataset-size"][SDXL]
    assert rules.min_duration_ms == c.TEST_DURATION_MS
    assert rules.min_queries == cfg["min-queries"][SDXL]
    assert rules.offline_min_samples_per_query == c.OFFLINE_MIN_SPQ_SINCE_V4[SDXL]
    assert rules.latency_constraint_ns == cfg["latency-constraint"][SDXL]
    target, upper = cfg["accuracy-target"][SDXL], cfg["accuracy-upper-limit"][SDXL]
    assert rules.accuracy_low == dict(zip(target[::2], target[1::2], strict=True))
    assert rules.accuracy_high == dict(zip(upper[::2], upper[1::2], strict=True))
    assert rules.max_accuracy_log_bytes == c.MAX_ACCURACY_LOG_SIZE
    images = c.REQUIRED_ACC_BENCHMARK[SDXL].get(version)
    assert rules.image_ids == (None if images is None else tuple(int(i) for i in
                                                                 images["images"]))
    assert rules.code_dir == c.SRC_PATH[version].rsplit("/", 1)[1]
    assert list(rules.system_statuses) == c.VALID_AVAILABILITIES
    assert list(rules.measure_files) == c.REQUIRED_MEASURE_FILES
    for scenario, field in rules.result_field.items():
        assert c.RESULT_FIELD_NEW[version][scenario] == field
    for scenario in ("Offline", "Server", "SingleStream"):
        uses = scenario in ("Server", "SingleStream", "MultiStream")
        assert (scenario in rules.early_stopping) == uses


def test_shipped_audit_configs_are_mlperfs():
    root = checkout() / "compliance"
    for test, path in (("TEST01", root / "TEST01" / SDXL / "audit.config"),
                       ("TEST04", root / "TEST04" / "audit.config")):
        theirs = {line.name: line.value for line in parse_conf_text(path.read_text(), str(path))
                  if line.model in ("*", SDXL)}
        ours = {line.name: line.value for line in parse_conf_text(AUDIT_CONFIGS[test], test)}
        assert ours == theirs, test
