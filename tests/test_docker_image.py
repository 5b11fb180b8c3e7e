# ruff: noqa: F811  (pytest fixtures imported from docker_support are parameters here)
"""Images built on a real engine: the wheels flavor and the build-dir flavor (from a build tree
assembled out of the wheels' own binaries), the content-tag cache, the printed `docker build`
command, image inspection, and the errors for a missing base image and a failing build."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from docker_support import (  # noqa: F401  (pytest fixtures)
    WHEEL_VERSION,
    build,
    build_dir_image,
    build_tree,
    docker_client,
    project_snapshot,
    run_in_image,
    wheels_image,
)

from runner.base.errors import RunnerError
from runner.docker.image import LABEL, PROVENANCE_PATH, build_image, image_info, parse_source

pytestmark = [pytest.mark.slow, pytest.mark.docker]

WHERE_FROM = (
    "import json, shutil, iree.compiler, iree.runtime, runner; "
    "print(json.dumps({'compiler': iree.compiler.__file__, 'runtime': iree.runtime.__file__, "
    "'runner': runner.__file__, 'iree-compile': shutil.which('iree-compile')}))"
)


def _where(client, tag):
    code, out = run_in_image(client, tag, ["python3", "-c", WHERE_FROM])
    assert code == 0, out
    return json.loads(out.strip().splitlines()[-1])


def test_wheels_image_imports_runner_and_runs_iree_compile(docker_client, wheels_image):
    code, out = run_in_image(docker_client, wheels_image.tag, ["python3", "-c", (
        "import iree.runtime, numpy, runner.rundir.mlperf_log as log; "
        "text = numpy.empty(6, numpy.uint8); "
        "log.hex_upper_into(numpy.array([10, 255, 7], numpy.uint8), text); "
        "print('imports ok', text.tobytes().decode())")])
    # the base image has no C compiler: the log's hex comes from numpy's encoder there
    assert code == 0 and "imports ok 0AFF07" in out, out
    code, out = run_in_image(docker_client, wheels_image.tag, ["iree-compile", "--version"])
    assert code == 0, out
    assert "IREE compiler version 3.13" in out
    where = _where(docker_client, wheels_image.tag)
    assert where["compiler"].startswith("/opt/venv/lib/")
    assert where["runtime"].startswith("/opt/venv/lib/")
    assert where["iree-compile"] == "/opt/venv/bin/iree-compile"


def test_unchanged_inputs_are_a_cache_hit(docker_client, wheels_image, project_snapshot):
    # the image the tag names now (a `docker build` of the printed command, elsewhere in the
    # session, retags it: the same inputs, another image id)
    current = docker_client.images.get(wheels_image.tag).id
    lines: list[str] = []
    again = build(f"wheels:{WHEEL_VERSION}", docker_client, project_snapshot,
                  progress=lines.append)
    assert again.cached and again.tag == wheels_image.tag
    assert again.image_id == current
    assert lines[-1].startswith(f"cached: {again.tag}")
    assert not any(line.startswith("Step ") for line in lines)  # the engine built nothing
    assert not again.plan.context_dir.exists()  # a hit cleans its staged context up


def test_a_changed_input_is_a_new_tag(docker_client, wheels_image, project_snapshot, tmp_path):
    import shutil as sh

    changed = tmp_path / "project"
    sh.copytree(project_snapshot, changed)
    # A host-built extension is not an input: the image's wheel build makes its own.
    (changed / "runner" / "rundir" / "_hex.cpython-399-x86_64-linux-gnu.so").write_bytes(
        b"host build")
    same = build(f"wheels:{WHEEL_VERSION}", docker_client, changed, dry_run=True, progress=None,
                 keep_context=True)
    assert same.plan.inputs_hash == wheels_image.plan.inputs_hash
    assert (same.plan.context_dir / "project" / "runner" / "rundir" / "_hex.c").is_file()
    assert not list((same.plan.context_dir / "project").rglob("*.so"))
    sh.rmtree(same.plan.context_dir)
    (changed / "runner" / "docker" / "__init__.py").write_text('"""changed"""\n')
    dry = build(f"wheels:{WHEEL_VERSION}", docker_client, changed, dry_run=True, progress=None,
                keep_context=True)
    assert dry.tag != wheels_image.tag and dry.plan.inputs_hash != wheels_image.plan.inputs_hash
    sh.rmtree(dry.plan.context_dir)


def test_image_info_has_id_labels_and_the_provenance_from_inside(docker_client, wheels_image):
    info = image_info(wheels_image.tag, client=docker_client)
    assert info["id"] == docker_client.images.get(wheels_image.tag).id
    assert wheels_image.tag in info["tags"]
    labels = info["labels"]
    assert labels[LABEL + "flavor"] == "wheels"
    assert labels[LABEL + "iree.version"] == WHEEL_VERSION
    assert labels[LABEL + "inputs-sha256"] == wheels_image.plan.inputs_hash
    assert labels[LABEL + "base-image-id"] == wheels_image.plan.base_image_id
    assert labels[LABEL + "provenance-file"] == PROVENANCE_PATH
    prov = info["provenance"]
    assert prov["flavor"] == "wheels"
    assert prov["wheels_installed"] == {"iree-base-compiler": WHEEL_VERSION,
                                        "iree-base-runtime": WHEEL_VERSION}
    assert prov["iree.runtime"]["file"].startswith("/opt/venv/")
    assert "local-task" in prov["runtime_drivers"]


def test_the_final_image_carries_no_build_secrets(docker_client, wheels_image):
    image = docker_client.images.get(wheels_image.tag)
    history = " ".join(h.get("CreatedBy", "") for h in image.history())
    assert "runner-build-secrets" not in history and "ca-bundle" not in history
    env = image.attrs["Config"]["Env"]
    assert not any(e.startswith(("PIP_CONFIG_FILE=", "PIP_CERT=", "SSL_CERT_FILE=")) for e in env)
    code, out = run_in_image(docker_client, wheels_image.tag,
                             ["sh", "-c", "test ! -e /run/runner-build-secrets && echo clean"])
    assert code == 0 and "clean" in out, out


def test_build_dir_image_takes_iree_from_the_tree(docker_client, build_dir_image, build_tree):
    where = _where(docker_client, build_dir_image.tag)
    assert where["compiler"] == \
        "/opt/iree/build/compiler/bindings/python/iree/compiler/__init__.py"
    assert where["runtime"] == "/opt/iree/build/runtime/bindings/python/iree/runtime/__init__.py"
    assert where["iree-compile"] == "/opt/iree/build/tools/iree-compile"
    assert where["runner"].startswith("/opt/venv/lib/")
    for wheel in ("iree-base-runtime", "iree-base-compiler"):
        code, out = run_in_image(docker_client, build_dir_image.tag, ["pip", "show", wheel])
        assert code != 0 and "not found" in out.lower(), out
    code, out = run_in_image(docker_client, build_dir_image.tag,
                             ["sh", "-c", "which iree-compile && iree-compile --version "
                              "&& iree-run-module --help >/dev/null && echo tools-ok"])
    assert code == 0 and "tools-ok" in out and "IREE compiler version" in out, out
    info = image_info(build_dir_image.tag, client=docker_client)
    assert info["labels"][LABEL + "flavor"] == "build-dir"
    version = (build_tree / "compiler/bindings/python/iree/compiler/version.py").read_text()
    assert f'"{info["labels"][LABEL + "iree.version"]}"' in version
    assert info["provenance"]["wheels_installed"] == {"iree-base-compiler": None,
                                                      "iree-base-runtime": None}


def test_the_printed_docker_build_command_builds_the_same_image(docker_client, wheels_image,
                                                                project_snapshot):
    """--dry-run's command, run by the docker CLI itself, gives an image with the same inputs."""
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI on PATH")
    dry = build(f"wheels:{WHEEL_VERSION}", docker_client, project_snapshot, dry_run=True,
                progress=None, keep_context=True)
    argv = dry.plan.command()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    image = docker_client.images.get(dry.tag)
    assert image.labels[LABEL + "inputs-sha256"] == dry.plan.inputs_hash
    # The SDK now finds it: the CLI build and the SDK build are interchangeable.
    again = build(f"wheels:{WHEEL_VERSION}", docker_client, project_snapshot, progress=None)
    assert again.cached and again.tag == dry.tag
    shutil.rmtree(dry.plan.context_dir, ignore_errors=True)
    assert shlex.join(argv).startswith("docker build --network host")


def test_a_missing_base_image_is_a_clear_error(docker_client):
    with pytest.raises(RunnerError) as e:
        build_image(parse_source(f"wheels:{WHEEL_VERSION}"), client=docker_client,
                    base_image="runner-base:no-such-tag", progress=None)
    assert "not in the docker engine" in str(e.value)
    assert "docker pull runner-base:no-such-tag" in str(e.value)


def test_a_failing_build_names_the_step_and_shows_the_log(docker_client, wheels_image,
                                                          project_snapshot):
    with pytest.raises(RunnerError) as e:
        build("wheels:0.0.1", docker_client, project_snapshot, progress=None)
    text = str(e.value)
    assert "docker build failed at Step " in text
    assert 'pip install' in text.split("\n")[0]  # the failing step is the wheel install
    assert "iree-base-compiler==0.0.1" in text  # pip's own complaint, from the log tail
    assert "reproduce with: docker build --network host" in text
    # The failed build's context is kept for that command; it exists, then is cleared here.
    kept = shlex.split(text.split("reproduce with: ", 1)[1])[-1]
    assert (Path(kept) / "Dockerfile").is_file()
    shutil.rmtree(kept)
