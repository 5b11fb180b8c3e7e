"""LoadGen's settings: scenarios, modes, user.conf and audit.config, checked before anything runs.

LoadGen's own parser answers a bad file with -EINVAL and no line number, and silently
ignores unknown keys (a typo in `min_duration` would run a 10-minute test); so every conf
file is parsed here first, with the file and line named in the error. The MLPerf rules
themselves (SDXL's 5000 performance samples, Server's 20 s target latency, Offline's 5000
min query count) are LoadGen's built-in mlperf.conf (`FromConfig(..., conf_type=0)`); the
profile's values, the user's user.conf and the command's flags go into one merged user.conf
written into the out dir (it is the `user.conf` MLPerf's measurements directory wants).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import BadInput
from runner.config.profile import MLPERF_SAMPLES as MLPERF_SAMPLES  # the QSL: 5000 captions
from runner.inputs.limits import read_text
from runner.inputs.userconf import conf_value

MODEL = "stable-diffusion-xl"
SCENARIOS = {"singlestream": "SingleStream", "offline": "Offline", "server": "Server"}
MODES = ("accuracy", "performance", "submission")

# Keys LoadGen's TestSettings::FromConfig looks up (mlperf.conf, user.conf, audit.config).
KNOWN_KEYS = frozenset({
    "mode", "min_duration", "max_duration", "min_query_count", "max_query_count",
    "qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed", "accuracy_log_rng_seed",
    "accuracy_log_probability", "accuracy_log_sampling_target", "print_timestamps",
    "performance_issue_unique", "performance_issue_same", "performance_issue_same_index",
    "performance_sample_count_override", "sample_concatenate_permutation",
    "target_latency_percentile", "target_latency", "target_qps", "samples_per_query",
    "max_async_queries", "coalesce_queries", "test05", "test05_qsl_rng_seed",
    "test05_sample_index_rng_seed", "test05_schedule_rng_seed", "use_token_latencies",
    "ttft_latency", "tpot_latency", "infer_token_latencies", "token_latency_scaling_factor",
})
# What only an audit.config may set: a user.conf that switches the mode or the issue
# pattern would make a "performance" run something else without saying so.
AUDIT_ONLY_KEYS = frozenset({"mode", "performance_issue_unique", "performance_issue_same",
                             "performance_issue_same_index", "accuracy_log_sampling_target",
                             "accuracy_log_probability", "accuracy_log_rng_seed"})
SCENARIO_NAMES = ("*", "Offline", "Server", "SingleStream", "MultiStream")

# The compliance tests' audit.config, as MLPerf inference ships them for SDXL
# (compliance/TEST01/stable-diffusion-xl/audit.config, compliance/TEST04/audit.config):
# TEST01 is performance mode with results sampled into the accuracy log (sampling target
# 128: a 1024x1024 image is 8x the bytes of the records the generic 1024 was set for);
# TEST04 issues one sample over and over. (Its `stable-diffusion-xl.Offline.min_query_count`
# line is inert: LoadGen reads an audit.config under the model name `*`.) `--audit-conf`
# replaces one.
AUDIT_CONFIGS = {
    "TEST01": ("*.*.mode = 2\n"
               "*.*.accuracy_log_rng_seed = 720381539243781796\n"
               "*.*.accuracy_log_sampling_target = 128\n"),
    "TEST04": "".join(f"*.{s}.mode = 2\n*.{s}.performance_issue_unique = 0\n"
                      f"*.{s}.performance_issue_same = 1\n"
                      f"*.{s}.performance_issue_same_index = 3\n"
                      for s in ("MultiStream", "Offline", "SingleStream", "Server"))
    + f"{MODEL}.Offline.min_query_count = 500\n",
}


@dataclass(frozen=True)
class ConfLine:
    model: str
    scenario: str
    key: str
    value: str
    where: str  # file:line

    @property
    def name(self) -> str:
        return f"{self.model}.{self.scenario}.{self.key}"


def parse_conf_text(text: str, where: str) -> list[ConfLine]:
    """`model.scenario.key = value` lines, `#` comments; every line's fault named."""
    out: list[ConfLine] = []
    seen: dict[str, ConfLine] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"{where}:{number}"
        name, eq, value = (part.strip() for part in line.partition("="))
        if not eq or not name or not value or " " in name or " " in value:
            raise BadInput(f"expected `model.scenario.key = value`, got {raw.strip()!r}",
                           where=at, fix=f"e.g. `{MODEL}.Offline.target_qps = 4`")
        parts = name.rsplit(".", 2)  # a model name may hold dots (wan-2.2-t2v-a14b)
        if len(parts) != 3 or not all(parts):
            raise BadInput(f"key {name!r} is not model.scenario.key", where=at,
                           fix=f"e.g. `{MODEL}.Server.target_qps` or `*.*.min_duration`")
        model, scenario, key = parts
        if scenario not in SCENARIO_NAMES:
            raise BadInput(f"unknown scenario {scenario!r} in {name!r}", where=at,
                           fix=f"use one of {', '.join(SCENARIO_NAMES)}")
        if key not in KNOWN_KEYS:
            raise BadInput(f"LoadGen has no setting {key!r} (it would ignore it silently)",
                           where=at, fix=f"use one of {', '.join(sorted(KNOWN_KEYS))}")
        value = conf_value(key, value, at)  # typed as LoadGen reads it (runner.inputs)
        entry = ConfLine(model, scenario, key, value, at)
        if name in seen and seen[name].value != value:
            raise BadInput(f"{name} is set twice: {seen[name].value} at {seen[name].where} "
                           f"and {value} here", where=at, fix="keep one of the two lines")
        seen[name] = entry
        out.append(entry)
    return out


def read_conf(path: Path, what: str) -> list[ConfLine]:
    return parse_conf_text(read_text(Path(path), what=what), str(path))


def applies(line: ConfLine, scenario: str) -> bool:
    return line.model in ("*", MODEL) and line.scenario in ("*", scenario)


@dataclass(frozen=True)
class Flags:
    """The command's LoadGen flags: --count, --min-duration, --min-query-count,
    --offline-expected-qps, --server-target-qps (each QPS flag is its scenario's, as the
    profile's `mlperf:` keys)."""

    count: int | None = None  # QSL size and performance sample count
    time_s: float | None = None  # minimum test duration, seconds (user.conf's is in ms)
    offline_qps: float | None = None  # Offline expected QPS
    server_qps: float | None = None  # Server target QPS
    # LoadGen's min_query_count: a test ends after this many queries and min_duration. In
    # Offline its one query holds that many samples (MLPerf's SDXL rule: 5000), so a short
    # performance run needs it set.
    min_queries: int | None = None


# The QPS flag of each scenario that has one (SingleStream keeps one query in flight).
QPS_FLAGS = {"Offline": "--offline-expected-qps", "Server": "--server-target-qps"}


def flag_settings(flags: Flags, scenario: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if flags.count is not None:
        out["performance_sample_count_override"] = str(flags.count)
    if flags.time_s is not None:
        out["min_duration"] = str(int(flags.time_s * 1000))
    if flags.min_queries is not None:
        out["min_query_count"] = str(flags.min_queries)
    qps = {"Offline": flags.offline_qps, "Server": flags.server_qps}.get(scenario)
    if qps is not None:
        out["target_qps"] = f"{qps:g}"
    return out


def profile_settings(mlperf: Any, scenario: str) -> dict[str, str]:
    """The system's user.conf values the profile carries (`mlperf:` section): the expected
    QPS (Offline), target QPS (Server) or expected latency (SingleStream, in ms)."""
    if scenario == "SingleStream":
        latency = mlperf.singlestream_expected_latency_ms
        return {} if latency is None else {"target_latency": f"{latency:g}"}
    qps = (mlperf.offline_expected_qps if scenario == "Offline"
           else mlperf.server_target_qps)
    return {} if qps is None else {"target_qps": f"{qps:g}"}


def merged_user_conf(scenario: str, mlperf: Any, user_lines: list[ConfLine], flags: Flags,
                     user_where: str | None) -> str:
    """One user.conf: the profile's values, then the user's file, then the flags.

    A flag that contradicts the user's file is an error rather than a silent winner: a
    submission's user.conf must say what was run.
    """
    for line in user_lines:
        if line.key in AUDIT_ONLY_KEYS:
            raise BadInput(f"{line.name} belongs in an audit.config, not a user.conf",
                           where=line.where,
                           fix="drop the line; compliance tests set it through --compliance")
    mine = [line for line in user_lines if applies(line, scenario)]
    from_flags = flag_settings(flags, scenario)
    for line in mine:
        if line.key in from_flags and float(from_flags[line.key]) != float(line.value):
            flag = {"performance_sample_count_override": "--count",
                    "min_duration": "--min-duration",
                    "min_query_count": "--min-query-count",
                    "target_qps": QPS_FLAGS.get(scenario, "")}[line.key]
            raise BadInput(f"{flag} sets {line.key} = {from_flags[line.key]} but the "
                           f"user.conf says {line.value}", where=line.where,
                           fix=f"drop {flag} or the user.conf line")
    values = profile_settings(mlperf, scenario)
    for key in sorted({line.key for line in mine}):
        values[key] = effective_value(mine, scenario, key) or ""
    values.update(from_flags)
    # Every line exact (model.scenario.key): LoadGen prefers an exact key over a wildcard
    # whatever the order, so resolving the wildcards here keeps the precedence above.
    # The user.conf's path on one comment line whatever it holds (a newline would end it).
    where = json.dumps(user_where) if user_where else "no user.conf"
    lines = [f"# Merged by `runner mlperf` for {MODEL} {scenario}: profile, then "
             f"{where}, then command-line flags."]
    lines += [f"{MODEL}.{scenario}.{k} = {v}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def audit_text(test: str, audit_conf: Path | None) -> str:
    """A compliance test's audit.config: the shipped one, or the user's (checked)."""
    if audit_conf is None:
        return AUDIT_CONFIGS[test]
    lines = read_conf(audit_conf, "audit.config")
    if not any(line.key == "mode" for line in lines):
        raise BadInput(f"an audit.config for {test} must set the mode (2: performance)",
                       where=str(audit_conf), fix="add `*.*.mode = 2`")
    return Path(audit_conf).read_text(encoding="utf-8")


def effective_value(lines: list[ConfLine], scenario: str, key: str) -> str | None:
    """LoadGen's lookup order: exact, then model wildcard, then scenario wildcard, then both."""
    for model, scen in ((MODEL, scenario), ("*", scenario), (MODEL, "*"), ("*", "*")):
        for line in reversed(lines):
            if (line.model, line.scenario, line.key) == (model, scen, key):
                return line.value
    return None
