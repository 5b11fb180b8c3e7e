"""MLPerf inference's rules for SDXL, per round, as one data table.

The round is not a flag: it is the one whose RNG seeds the installed LoadGen embeds (LoadGen
6.0.x writes v6.1's), since a tree whose logs carry one round's seeds and another round's
layout is rejected either way. Every value here is the one MLCommons' submission checker
(`tools/submission/submission_checker/constants.py`) enforces for `stable-diffusion-xl`;
tests/test_loadgen_rules.py compares the table with the checker's own config when a checkout
of mlcommons/inference is at hand, so a new round is a new entry here, not a code change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from runner.base.errors import BadInput

SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge")
DIVISIONS = ("closed", "open")
COMPLIANCE_TESTS = ("TEST01", "TEST04")


@dataclass(frozen=True)
class Round:
    version: str  # the checker's --version
    seeds: dict[str, int]  # qsl_rng_seed, sample_index_rng_seed, schedule_rng_seed
    # system_type -> (required scenarios, optional scenarios) for SDXL; a type absent here
    # does not take SDXL in this round.
    scenarios: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]
    compliance: tuple[str, ...]
    system_fields: tuple[str, ...]  # every systems/<id>.json key the checker requires
    meaningful_fields: tuple[str, ...]  # ... and those it rejects when empty
    measurement_fields: tuple[str, ...]  # measurements.json
    performance_sample_count: int
    dataset_size: int  # the accuracy test's QSL
    min_duration_ms: int
    min_queries: dict[str, int]  # scenarios without early stopping
    offline_min_samples_per_query: int
    latency_constraint_ns: dict[str, int]
    accuracy_low: dict[str, float]  # CLIP_SCORE, FID_SCORE inclusive lower bounds
    accuracy_high: dict[str, float]
    max_accuracy_log_bytes: int  # a truncated mlperf_log_accuracy.json is at most this
    # The accuracy images the checker demands (accuracy/images/<id>.png); None: this round's
    # checker names none, and the reference's own text_to_image/tools/sample_ids.txt apply.
    image_ids: tuple[int, ...] | None
    code_dir: str  # <division>/<submitter>/<code_dir>: the submitter's code
    early_stopping: tuple[str, ...] = ("Server", "SingleStream", "MultiStream")
    system_statuses: tuple[str, ...] = ("available", "preview", "rdi")
    measure_files: tuple[str, ...] = ("user.conf", "README.md")
    result_field: dict[str, str] = field(default_factory=lambda: {
        "Offline": "result_samples_per_second", "SingleStream": "early_stopping_latency_ss",
        "Server": "result_completed_samples_per_sec"})

    def required_scenarios(self, system_type: str) -> tuple[str, ...]:
        return self.scenarios[system_type][0]

    def allowed_scenarios(self, system_type: str) -> tuple[str, ...]:
        required, optional = self.scenarios[system_type]
        return required + optional


_SYSTEM_FIELDS = (
    "division", "submitter", "status", "system_name", "number_of_nodes",
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count",
    "host_memory_capacity", "host_storage_capacity", "host_storage_type",
    "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "framework", "operating_system", "system_type", "other_software_stack",
    "host_processor_frequency", "host_processor_caches", "host_memory_configuration",
    "host_processor_interconnect", "host_networking", "host_networking_topology",
    "accelerator_frequency", "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_memory_configuration",
    "accelerator_on-chip_memories", "cooling", "hw_notes", "sw_notes",
    "host_network_card_count", "system_type_detail")
_MEANINGFUL_FIELDS = (
    "division", "submitter", "system_type", "status", "system_name", "number_of_nodes",
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count",
    "host_memory_capacity", "host_memory_configuration", "host_storage_capacity",
    "host_storage_type", "host_networking", "host_network_card_count",
    "host_networking_topology", "accelerators_per_node", "accelerator_model_name",
    "accelerator_memory_capacity", "accelerator_host_interconnect",
    "accelerator_memory_configuration", "accelerator_interconnect", "cooling", "framework",
    "operating_system", "other_software_stack")

V6_1 = Round(
    version="v6.1",
    seeds={"qsl_rng_seed": 2085463073848966840, "sample_index_rng_seed": 2747215439041700203,
           "schedule_rng_seed": 16159082839903944936},
    scenarios={"edge": (("SingleStream", "Offline"), ()),
               "datacenter,edge": (("SingleStream", "Offline", "Server"), ())},
    compliance=COMPLIANCE_TESTS,
    system_fields=_SYSTEM_FIELDS,
    meaningful_fields=_MEANINGFUL_FIELDS,
    measurement_fields=("input_data_types", "retraining", "starting_weights_filename",
                        "weight_data_types", "weight_transformations"),
    performance_sample_count=5000,
    dataset_size=5000,
    min_duration_ms=600000,
    min_queries={"SingleStream": 1024, "Server": 270336, "Offline": 1},
    offline_min_samples_per_query=5000,
    latency_constraint_ns={"Server": 20000000000},
    accuracy_low={"CLIP_SCORE": 31.68631873, "FID_SCORE": 23.01085758},
    accuracy_high={"CLIP_SCORE": 31.81331801, "FID_SCORE": 23.95007626},
    max_accuracy_log_bytes=10 * 1024,
    image_ids=None,
    code_dir="src",
)
V6_0 = replace(
    V6_1, version="v6.0",
    seeds={"qsl_rng_seed": 2465351861681999779, "sample_index_rng_seed": 14276810075590677512,
           "schedule_rng_seed": 3936089224930324775},
    image_ids=(1311, 2476, 3644, 2188, 4114, 52, 388, 1195, 3427, 2289))
ROUNDS = {r.version: r for r in (V6_0, V6_1)}


def round_for_seeds(seeds: dict[str, int], loadgen_version: str) -> Round:
    """The round whose seeds LoadGen embeds; an error when the runner knows no such round."""
    for r in ROUNDS.values():
        if all(seeds.get(k) == v for k, v in r.seeds.items()):
            return r
    raise BadInput(
        f"the installed LoadGen {loadgen_version} embeds RNG seeds {seeds} of no MLPerf round "
        f"the runner knows ({', '.join(ROUNDS)})", where="mlcommons-loadgen",
        fix="install the LoadGen of a known round (pip install 'mlcommons-loadgen>=6.0,<7') "
        "or add the round to runner/loadgen/rules.py")


def installed_round() -> Round:
    """The round of the installed LoadGen, from the seeds its built-in mlperf.conf sets.

    `FromConfig(..., conf_type=0)` loads only the built-in rules and leaves LoadGen's
    once-per-process user.conf counter alone, so a later test in this process is unaffected.
    """
    import importlib.metadata

    import mlperf_loadgen as lg

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Offline
    settings.FromConfig("", "stable-diffusion-xl", "Offline", 0)
    seeds = {k: int(getattr(settings, k)) for k in V6_1.seeds}
    return round_for_seeds(seeds, importlib.metadata.version("mlcommons-loadgen"))


def check_scenarios(rules: Round, system_type: str, scenarios: list[str],
                    where: str) -> None:
    """A submission's system_type takes SDXL in this round, and the scenarios are exactly a
    set it accepts: every required one, nothing it does not know."""
    if system_type not in rules.scenarios:
        takes = " or ".join(repr(t) for t in rules.scenarios)
        raise BadInput(f"MLPerf {rules.version} takes no stable-diffusion-xl result from a "
                       f"{system_type!r} system", where=where,
                       fix=f"set mlperf.system.system_type to {takes} "
                       "(--set mlperf.system.system_type=...)")
    missing = [s for s in rules.required_scenarios(system_type) if s not in scenarios]
    extra = [s for s in scenarios if s not in rules.allowed_scenarios(system_type)]
    if missing or extra:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"{', '.join(extra)} not accepted"] if extra else [])
        raise BadInput(
            f"MLPerf {rules.version} {system_type} SDXL submission: {'; '.join(problems)}",
            where="--scenario", fix="run --scenario " + ",".join(
                s.lower() for s in rules.required_scenarios(system_type)))
