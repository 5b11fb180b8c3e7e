"""Property tests of the input boundary (runner/inputs/ and the parsers routed through it):
for arbitrary bytes and arbitrary structures, each reader returns a valid object or raises
the runner's one error, `RunnerError`; never another exception, within a time bound
(hypothesis' per-example deadline) and a memory bound (`bounded`).

CI runs them derandomized with a bounded example count (the `ci` profile, seconds in all);
`scripts/fuzz_inputs.py` runs the same properties with a random seed and many more examples.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.base.errors import RunnerError
from runner.cli.main import build_parser, main
from runner.config.model_config import ModelConfig
from runner.config.profile import load_profile
from runner.goldens.select import Expression
from runner.goldens.testfile import load_test_file
from runner.inputs import cliargs
from runner.inputs.captions import read_captions
from runner.inputs.jsonfile import parse_json, read_json
from runner.inputs.safetensors import read_header
from runner.inputs.userconf import conf_value
from runner.inputs.yamlfile import parse_yaml
from runner.loadgen.conf import KNOWN_KEYS, parse_conf_text
from runner.model.tensors import TensorSpec
from runner.rundir.mlperf_log import iter_log_samples

settings.register_profile(
    "ci", max_examples=int(os.environ.get("RUNNER_FUZZ_EXAMPLES", "50")), derandomize=True,
    deadline=2000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])
settings.register_profile(
    "fuzz", max_examples=int(os.environ.get("RUNNER_FUZZ_EXAMPLES", "5000")),
    derandomize=False, deadline=5000, print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("RUNNER_FUZZ_PROFILE", "ci"))

MEMORY_BOUND = 64 << 20  # bytes of Python heap one example may peak at


def bounded(fn: Callable[[], Any]) -> Any:
    """fn() -> its value, or None when it raised RunnerError; any other exception fails the
    property, and so does a Python heap peak over MEMORY_BOUND."""
    tracemalloc.start()
    try:
        return fn()
    except RunnerError as e:
        assert str(e)  # the error says something
        return None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < MEMORY_BOUND, f"peak Python heap {peak} bytes"


# JSON-shaped values, and hostile spellings of them.
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=5),
                           max_leaves=40)
HOSTILE_TEXT = ["NaN", "-Infinity", "1e400", "9" * 5000, "[" * 5000, '"\\ud800"', "\x00",
                "{" * 70 + "}" * 70, "[" * 65 + "]" * 65]
texts = st.text(max_size=300) | st.sampled_from(HOSTILE_TEXT) | st.builds(
    lambda v: json.dumps(v, allow_nan=True), json_values)


def _scalar_ok(node: Any) -> bool:
    if isinstance(node, float):
        return math.isfinite(node)
    return isinstance(node, str | int | bool | type(None))


def _json_shaped(value: Any) -> bool:
    """Strings, finite numbers, bools, None, lists and string-keyed mappings only."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not all(isinstance(k, str) for k in node):
                return False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif not _scalar_ok(node):
            return False
    return True


@given(texts)
def test_json_text_is_a_value_or_runner_error(text):
    value = bounded(lambda: parse_json(text, "x.json"))
    assert value is None or _json_shaped(value)


@given(st.binary(max_size=400))
def test_json_file_bytes_are_a_value_or_runner_error(tmp_path, data):
    path = tmp_path / "x.json"
    path.write_bytes(data)
    value = bounded(lambda: read_json(path, kind=None))
    assert value is None or _json_shaped(value)


yaml_texts = texts | st.sampled_from([
    "a: &x [1]\nb: *x", "a: !!python/object:os.system x", "a: !!set {1}", "a: .nan",
    "a: 2024-01-01", "1: x", "? [a]\n: 1", "a: 99999999999999999999999", "x: {a: 1}\n<<: {b: 2}",
    "- " * 200 + "x", "a:\n\t- b", "%YAML 1.1\n--- a", "a: !custom x",
    "l: &a [1,1]\nm: &b [*a,*a]\nn: &c [*b,*b]"])


@given(yaml_texts)
def test_yaml_text_is_json_shaped_or_runner_error(text):
    value = bounded(lambda: parse_yaml(text, "p.yaml"))
    assert value is None or _json_shaped(value)
    json.dumps(value)  # what a run manifest records


@given(st.binary(max_size=600) | st.builds(
    lambda rows: "id\tcaption\n" + "\n".join("\t".join(r) for r in rows),
    st.lists(st.lists(st.text(max_size=30), min_size=1, max_size=3), max_size=5)).map(
        lambda s: s.encode("utf-8", "surrogatepass")))
def test_captions_file_is_captions_or_runner_error(tmp_path, data):
    path = tmp_path / "captions.tsv"
    path.write_bytes(data)
    value = bounded(lambda: read_captions(path))
    assert value is None or all(isinstance(c, str) for c in value)


conf_lines = st.builds(lambda m, s, k, v: f"{m}.{s}.{k} = {v}",
                       st.sampled_from(["*", "stable-diffusion-xl", "x"]),
                       st.sampled_from(["*", "Offline", "Server", "Bad"]),
                       st.sampled_from(sorted(KNOWN_KEYS)),
                       st.text(max_size=12) | st.integers().map(str) | st.sampled_from(
                           ["-5", "1e3", "0x10", "010", "nan", "inf", "1.5",
                            "18446744073709551621"]))


@given(st.lists(conf_lines, max_size=6).map("\n".join) | st.text(max_size=200))
def test_user_conf_is_settings_or_runner_error(text):
    lines = bounded(lambda: parse_conf_text(text, "user.conf"))
    for line in lines or ():
        assert line.value == conf_value(line.key, line.value, "again")  # canonical


def _safetensors(header: Any, data: bytes = b"", length: int | None = None) -> bytes:
    raw = json.dumps(header, allow_nan=True).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


tensor_entries = st.fixed_dictionaries({
    "dtype": st.sampled_from(["F32", "F16", "I64", "X9"]) | scalars,
    "shape": st.lists(st.integers(min_value=-2, max_value=2**40), max_size=4) | scalars,
    "data_offsets": st.lists(st.integers(min_value=-2, max_value=2**40), max_size=3) | scalars})


@given(st.binary(max_size=200)
       | st.builds(_safetensors, json_values | st.dictionaries(st.text(max_size=8),
                                                                tensor_entries, max_size=3),
                   st.binary(max_size=64), st.none() | st.integers(0, 2**64 - 1)))
def test_safetensors_header_is_checked_or_runner_error(tmp_path, data):
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    header = bounded(lambda: read_header(path))
    if header is not None:
        assert header.file_bytes <= len(data)


@given(st.text(max_size=200) | st.builds(
    " ".join, st.lists(st.sampled_from(["a", "b", "not", "and", "or", "(", ")"]),
                       max_size=300)))
def test_expression_parses_and_matches_or_runner_error(text):
    expr = bounded(lambda: Expression(text, "-m"))
    if expr is not None:
        assert isinstance(expr.matches({"a"}.__contains__), bool)


@given(st.text(max_size=60) | st.builds(lambda dims, t: "x".join([*dims, t]),
                                         st.lists(st.integers(0, 10**30).map(str), max_size=5),
                                         st.sampled_from(["f32", "bf16", "i1", "zz"])))
def test_tensor_types_are_specs_or_runner_error(text):
    spec = bounded(lambda: TensorSpec.parse(text))
    if spec is not None:
        assert spec.nbytes < 2**63


test_file_fields = st.dictionaries(
    st.sampled_from(["mlir", "inputs", "outputs", "real_weights", "compiler_flags", "device",
                     "type", "markers", "modules", "module", "run_args", "expected_outputs",
                     "golden_time_ms", "threshold_args", "tuner_file", "weights",
                     "golden_dispatch_count", "compile_only", "pipeline_mlir"]),
    json_values, max_size=6)


@given(test_file_fields | json_values)
def test_test_suite_file_is_tests_or_runner_error(tmp_path, raw):
    path = tmp_path / "suite" / "clip_cpu.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(raw, allow_nan=True))
    bounded(lambda: load_test_file(path))


MODEL = json.loads((Path(__file__).resolve().parent.parent / "runner" / "assets" / "tiny"
                    / "model.json").read_text())


@given(st.dictionaries(st.sampled_from(sorted(MODEL)), json_values, max_size=4))
def test_model_config_is_a_config_or_runner_error(tmp_path, changes):
    bounded(lambda: ModelConfig.from_dict({**MODEL, **changes}, tmp_path / "model.json"))


@given(st.binary(max_size=300) | st.builds(lambda v: json.dumps(v).encode(),
                                           st.lists(json_values, max_size=3)))
def test_accuracy_log_is_samples_or_runner_error(tmp_path, data):
    path = tmp_path / "mlperf_log_accuracy.json"
    path.write_bytes(data)
    bounded(lambda: list(iter_log_samples(path, (1, 1, 3))))


set_values = yaml_texts | st.sampled_from(["[1", "!!binary aGk=", "*a", "&a 1", "{a: 1}"])
set_keys = st.sampled_from(["layout.devices", "layout.batch_size", "layout.cpd", "name",
                            "target.chip", "accuracy.fid", "mlperf.server_target_qps",
                            "model", "layout", "nope.x", "", "."])


@given(st.lists(st.tuples(set_keys, set_values), max_size=3))
def test_set_overrides_make_a_profile_or_runner_error(overrides):
    from runner.config.overrides import profile_overrides

    def load() -> Any:
        return load_profile("cpu", profile_overrides([f"{k}={v}" for k, v in overrides]))
    bounded(load)


NUMERIC_TYPES = [cliargs.COUNT, cliargs.COUNT_OR_ZERO, cliargs.SEED, cliargs.SECONDS,
                 cliargs.TEST_SECONDS, cliargs.RATE, cliargs.PERCENT, cliargs.SCALE,
                 cliargs.count_list]


@given(st.sampled_from(NUMERIC_TYPES),
       st.text(max_size=30) | st.sampled_from(["nan", "inf", "-inf", "1e999", "-1", "0", "1,2",
                                               "9" * 400, "0x10", "1_000"]))
def test_numeric_flags_are_finite_in_range_or_a_usage_error(kind, text):
    try:
        value = kind(text)
    except argparse.ArgumentTypeError:
        return
    values = value if isinstance(value, list) else [value]
    assert all(math.isfinite(v) and v >= 0 for v in values)


OPTIONS = {"run": ["--count", "--cpd", "--batch-size", "--vae-batch-size", "--nodes",
                   "--cpus-per-node", "--max-resubmits"],
           "mlperf": ["--count", "--min-duration", "--offline-expected-qps",
                      "--server-target-qps"],
           "bench": ["--repetitions", "--warmup"],
           "compile": ["--batch-sizes"]}


@given(st.sampled_from([(c, o) for c, opts in OPTIONS.items() for o in opts]),
       st.text(max_size=20) | st.sampled_from(["nan", "inf", "-1", "1e400", "0"]))
def test_cli_option_parsing_is_a_namespace_or_a_usage_error(capsys, option, value):
    command, flag = option
    argv = [command, flag, value] + (["stages"] if command == "bench" else [])
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        assert e.code == 2
        assert "Traceback" not in capsys.readouterr().err


@given(st.lists(st.tuples(set_keys, set_values), max_size=2))
def test_plan_with_any_set_exits_0_or_2(capsys, overrides):
    argv = ["plan", "--profile", "cpu", "--json"]
    for key, value in overrides:
        argv += ["--set", f"{key}={value}"]
    assert main(argv) in (0, 2)
    capsys.readouterr()


@pytest.mark.parametrize("flag", ["--min-duration", "--offline-expected-qps",
                                  "--server-target-qps"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_mlperf_duration_and_qps_refuse_nan_and_inf(capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        main(["mlperf", "--profile", "tiny", f"{flag}={value}", "--out", "x"])
    assert e.value.code == 2
    assert f"argument {flag}: '{value}' is not a number" in capsys.readouterr().err
