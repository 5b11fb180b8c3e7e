"""The image recipes and the input checks that need no engine: the assembled Dockerfiles (the
source flavor's full IREE build takes hours, so its recipe is checked as text), source/commit
validation, the pip/CA passthrough, dry runs, and the error for an unreachable engine."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from runner.base.errors import RunnerError
from runner.docker.buildenv import host_build_network, mask
from runner.docker.engine import connect
from runner.docker.image import (
    FLAVORS,
    assemble_dockerfile,
    build_image,
    content_tag,
    parse_source,
    validate_tag,
)
from runner.inputs.iree_build import validate_commit

SHA = "89ece87b89852100c0a4ac3d515e14842d090967"


def _stages(text: str) -> dict[str, str]:
    """stage name -> the image it starts FROM, in order."""
    return {m.group(2): m.group(1)
            for m in re.finditer(r"(?m)^FROM (\S+) AS (\S+)$", text)}


def _stage_body(text: str, stage: str) -> str:
    start = re.search(rf"(?m)^FROM \S+ AS {re.escape(stage)}$", text)
    assert start, stage
    nxt = re.search(r"(?m)^FROM ", text[start.end():])
    return text[start.start(): start.end() + (nxt.start() if nxt else len(text))]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_shares_the_worker_stages_and_keeps_secrets_out(flavor):
    text = assemble_dockerfile(flavor)
    assert not re.search(r"(?m)^# runner:include", text)
    stages = _stages(text)
    # One shape for all three: the shared stages, each flavor's own in between.
    assert stages["python-base"] == "${BASE_IMAGE}"
    assert stages["worker-venv"] == "iree-python"
    assert stages["final-venv"] == "worker-venv"
    assert stages["image"] == "${BASE_IMAGE}"
    assert list(stages)[-1] == "image"
    assert "iree-tree" in stages and "project-wheel" in stages
    # Every COPY --from names a stage defined before it.
    for m in re.finditer(r"COPY --from=(\S+)", text):
        assert m.group(1) in list(stages)[: list(stages).index("image")]
    # The secrets are copied once, in python-base, and the final stage never sees them.
    assert len(re.findall(r"(?m)^COPY [^\n]*runner-build/secrets", text)) == 1
    assert "runner-build/secrets" in _stage_body(text, "python-base")
    final = _stage_body(text, "image")
    assert "runner-build-secrets" not in final and "runner-build/secrets" not in final
    assert "PIP_CONFIG_FILE" not in final and "PIP_CERT" not in final
    # The shared worker layer installs the project: deps, then its own wheel offline.
    assert "pip install /tmp/runner-deps" in _stage_body(text, "worker-venv")
    assert "pip install --no-deps --no-index" in final
    assert f"--flavor {flavor}" in final and "verify_iree.py" in final


@pytest.mark.parametrize("flavor", ["source", "build-dir"])
def test_tree_flavors_put_the_tree_first_and_remove_the_wheels_last(flavor):
    text = assemble_dockerfile(flavor)
    final_venv = _stage_body(text, "final-venv")
    assert "pip uninstall -y iree-base-compiler iree-base-runtime" in final_venv
    # Nothing installs packages into the venv after the uninstall except the project wheel,
    # which goes in with --no-deps (so it cannot pull iree-base-runtime back).
    after = text[text.index("pip uninstall -y iree-base-compiler"):]
    installs = re.findall(r"pip install[^\n]*", after)
    assert installs and all("--no-deps" in i for i in installs)
    final = _stage_body(text, "image")
    assert "ENV PATH=/opt/iree/build/tools:$PATH" in final
    assert ("PYTHONPATH=/opt/iree/build/compiler/bindings/python:"
            "/opt/iree/build/runtime/bindings/python") in final
    assert final.index("PYTHONPATH=") < final.index("python3 /opt/runner/verify_iree.py")


def test_source_recipe_builds_iree_from_the_commit_with_cmake_ninja_ccache():
    text = assemble_dockerfile("source")
    tree = _stage_body(text, "iree-tree")
    for arg in ("IREE_GIT_URL", "IREE_COMMIT", "IREE_TARGET_BACKENDS", "IREE_HAL_DRIVERS",
                "CMAKE_BUILD_TYPE"):
        assert re.search(rf"(?m)^ARG {arg}\b", tree), arg
    for flag in ("-G Ninja", "-DIREE_BUILD_PYTHON_BINDINGS=ON",
                 "-DPython3_EXECUTABLE=/opt/venv/bin/python",
                 "-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                 "-DIREE_TARGET_BACKEND_$b=ON", "-DIREE_HAL_DRIVER_$d=ON",
                 "-DIREE_TARGET_BACKEND_DEFAULTS=OFF", "-DIREE_HAL_DRIVER_DEFAULTS=OFF"):
        assert flag in tree, flag
    assert 'ARG IREE_TARGET_BACKENDS="LLVM_CPU ROCM"' in tree
    assert 'ARG IREE_HAL_DRIVERS="LOCAL_SYNC LOCAL_TASK HIP"' in tree
    assert 'git fetch -q --depth 1 origin "$IREE_COMMIT"' in tree
    assert "git submodule update" in tree and "git rev-parse HEAD > /opt/iree/COMMIT" in tree
    assert "ENV CCACHE_DIR=/ccache" in tree
    # The build's failure is never swallowed by the stats line after it.
    assert "{ ccache --show-stats || true; }" in tree
    final = _stage_body(text, "image")
    assert '--expect-commit "$IREE_COMMIT"' in final


def test_the_loop_expands_to_the_lab_cmake_flags():
    """Run the recipe's flag loop in a shell with the lab's build args."""
    import subprocess

    tree = _stage_body(assemble_dockerfile("source"), "iree-tree")
    loop = re.search(r'flags="" \\\n(.*?)&& echo "cmake', tree, re.S).group(1)
    script = 'flags=""\n' + loop.replace("\\\n", "\n").replace("&& for", "for") + \
        '\necho "$flags"'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                         env={"IREE_TARGET_BACKENDS": "LLVM_CPU ROCM",
                              "IREE_HAL_DRIVERS": "LOCAL_TASK HIP", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["-DIREE_TARGET_BACKEND_LLVM_CPU=ON",
                                  "-DIREE_TARGET_BACKEND_ROCM=ON",
                                  "-DIREE_HAL_DRIVER_LOCAL_TASK=ON", "-DIREE_HAL_DRIVER_HIP=ON"]


@pytest.mark.parametrize("good,expected", [
    ("deadbee", "deadbee"), (SHA.upper(), SHA), ("v3.13.0", "v3.13.0"),
    ("release/3.13", "release/3.13"), ("main", "main"), ("iree-3.13.0rc20250601", None),
])
def test_good_commits_and_refs_pass(good, expected):
    assert validate_commit(good) == (expected or good)


@pytest.mark.parametrize("bad", [
    "", "-rf", "--upload-pack=touch /tmp/x", "main;rm -rf /", "$(whoami)", "a`id`", "a|b",
    "a..b", "refs/../x", "v1 2", "feature/", "x.lock", "x\n", "a@{1}", "/abs", ".hidden",
    "g" * 201, "a//b",
])
def test_bad_commits_are_rejected(bad):
    with pytest.raises(RunnerError) as e:
        parse_source(f"source:{bad}")
    assert "--iree" in str(e.value)


@pytest.mark.parametrize("spec", ["wheels", "wheels:", "wheel:3.13.0", "wheels:latest",
                                  "wheels:3.13.0;id", "docker:x", "build-dir:"])
def test_bad_sources_are_rejected(spec):
    with pytest.raises(RunnerError):
        parse_source(spec)


@pytest.mark.parametrize("url", ["file:///opt/wheels", "https://user:tok@host/x",
                                 "https://host/$(id)", "https://host/a b", "-f"])
def test_bad_find_links_are_rejected_without_echoing_credentials(url):
    with pytest.raises(RunnerError) as e:
        parse_source("wheels:3.14.0rc20250601", find_links=url)
    assert "tok" not in str(e.value)


def test_source_options_are_validated():
    with pytest.raises(RunnerError, match="unknown name 'rcom'"):
        parse_source(f"source:{SHA}", backends=("rcom",))
    with pytest.raises(RunnerError, match="source: builds only"):
        parse_source("wheels:3.13.0", backends=("rocm",))
    s = parse_source(f"source:{SHA}", backends=("rocm", "llvm-cpu", "rocm"))
    assert s.backends == ("rocm", "llvm-cpu")


def test_build_dir_must_be_a_tree_with_bindings(tmp_path):
    with pytest.raises(RunnerError, match="not a directory"):
        parse_source(f"build-dir:{tmp_path / 'nope'}")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "iree-compile").write_text("")
    with pytest.raises(RunnerError, match="compiler/bindings/python"):
        parse_source(f"build-dir:{tmp_path}")


@pytest.mark.parametrize("tag,ok", [
    ("iree-sdxl-runner:dev", True), ("rocm/dev-ubuntu-22.04:6.3", True),
    ("localhost:5000/a/b:c", True), ("runner-base:bookworm", True),
    ("UPPER:x", False), ("a:b c", False), ("a;b", False), ("-a", False), ("a:-b", False),
])
def test_tags(tag, ok):
    if ok:
        assert validate_tag(tag) == tag
    else:
        with pytest.raises(RunnerError):
            validate_tag(tag)


def test_content_tag_is_readable_and_carries_the_hash():
    digest = "ab" * 32
    assert content_tag(parse_source("wheels:3.13.0"), digest) == \
        "iree-sdxl-runner:wheels-3.13.0-abababababab"
    assert content_tag(parse_source(f"source:{SHA}"), digest) == \
        f"iree-sdxl-runner:source-{SHA[:12]}-abababababab"
    assert content_tag(parse_source("source:release/3.13"), digest) == \
        "iree-sdxl-runner:source-release-3.13-abababababab"


def test_pip_settings_pass_urls_only_and_mask_credentials(monkeypatch, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://user:s3cret@mirror.example/simple\n"
                    "extra-index-url = file:///opt/local https://second.example/simple\n"
                    "find-links = /opt/wheels\ntrusted-host = mirror.example\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    net = host_build_network()
    lines = net.pip_conf.splitlines()
    assert "index-url = https://user:s3cret@mirror.example/simple" in lines
    assert "extra-index-url = https://second.example/simple" in lines
    assert "trusted-host = mirror.example" in lines
    assert not any(line.startswith("find-links") for line in lines)
    assert net.proxies["HTTPS_PROXY"] == "http://proxy.example:3128"
    assert net.ca_bundle.is_file()
    assert all("s3cret" not in n for n in net.notes)
    assert mask("https://u:p@h/x and http://h2/y") == "https://***@h/x and http://h2/y"


def test_dry_run_without_an_engine_stages_a_runnable_context(monkeypatch, tmp_path, capsys):
    """No engine at all: the plan and command still come out, with the tag caveat noted;
    --keep-context keeps the context under the cache, so the printed command runs."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    result = build_image(parse_source(f"source:{SHA}", backends=("llvm-cpu", "rocm"),
                                      drivers=("local-task", "hip")),
                         dry_run=True, progress=print, keep_context=True)
    argv = result.plan.command()
    ctx = Path(argv[-1])
    assert argv[:4] == ["docker", "build", "--network", "host"]
    assert argv[argv.index("-f") + 1] == str(ctx / "Dockerfile")
    assert (ctx / "Dockerfile").read_text() == assemble_dockerfile("source")
    assert f"IREE_COMMIT={SHA}" in argv
    assert "IREE_TARGET_BACKENDS=LLVM_CPU ROCM" in argv
    assert "IREE_HAL_DRIVERS=LOCAL_TASK HIP" in argv
    assert argv[argv.index("-t") + 1].startswith(f"iree-sdxl-runner:source-{SHA[:12]}-")
    assert (ctx / "project" / "pyproject.toml").is_file()
    assert (ctx / "project-deps" / "runner" / "__init__.py").read_text() == ""
    assert (ctx / "runner-build" / "secrets" / "ca-bundle.crt").stat().st_size > 0
    assert (ctx / "ccache").is_dir()
    assert ctx.is_relative_to(tmp_path / "cache" / "docker" / "contexts")
    assert "is not in a reachable engine" in capsys.readouterr().out


def test_a_dry_run_hashes_its_context_in_a_temporary_directory_and_removes_it(
        monkeypatch, tmp_path, capsys):
    """A dry run writes nothing, the cache included (it left a 37 MB context under
    docker/contexts/ for every `validate --dry-run` of a source build): the context is
    staged elsewhere to compute the content tag, removed, and the output says how to keep
    it. The tag is the one a kept context gives."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    cache = tmp_path / "cache"
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(cache))
    source = parse_source(f"source:{SHA}")
    dry = build_image(source, dry_run=True, progress=print)
    assert not cache.exists()
    ctx = Path(dry.plan.command()[-1])
    assert not ctx.exists() and not ctx.is_relative_to(cache)
    assert "then removed (a dry run writes nothing)" in capsys.readouterr().out
    kept = build_image(source, dry_run=True, progress=None, keep_context=True)
    assert kept.tag == dry.tag and kept.plan.inputs_hash == dry.plan.inputs_hash
    assert kept.plan.context_dir.is_dir()


def test_unreachable_engine_is_a_runner_error_naming_the_setup_script(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/bogus.sock")
    with pytest.raises(RunnerError) as e:
        connect(timeout=5)
    assert "docker_setup.sh" in str(e.value) and "bogus.sock" in str(e.value)
    with pytest.raises(RunnerError, match=r"docker_setup\.sh"):
        build_image(parse_source("wheels:3.13.0"), progress=None)


def test_cli_dry_run_prints_one_shell_line(monkeypatch, tmp_path, capsys):
    from runner.cli.main import main

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["image", "build", "--iree", "wheels:3.13.0", "--dry-run",
                 "--tag", "my-runner:dev", "--quiet"]) == 0
    argv = shlex.split(capsys.readouterr().out.strip())
    assert argv[:2] == ["docker", "build"]
    tags = [argv[i + 1] for i, a in enumerate(argv) if a == "-t"]
    assert tags[0].startswith("iree-sdxl-runner:wheels-3.13.0-") and tags[1] == "my-runner:dev"
    assert "IREE_VERSION=3.13.0" in argv


def test_a_branch_or_tag_is_pinned_to_its_commit(tmp_path):
    """`source:<ref>` must not be a cache hit forever: the ref is resolved at plan time."""
    import dataclasses
    import shutil
    import subprocess

    from runner.docker.image import _pin_ref

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "iree"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    repo.mkdir()
    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "one")
    first = git("rev-parse", "HEAD")
    git("tag", "-a", "v1", "-m", "annotated")
    git("commit", "-q", "--allow-empty", "-m", "two")
    head = git("rev-parse", "HEAD")
    # parse_source accepts only http(s) URLs; a local path stands in for the remote here.
    base = dataclasses.replace(parse_source("source:main"), git_url=str(repo))
    notes: list[str] = []
    assert _pin_ref(base, notes).commit == head
    assert _pin_ref(dataclasses.replace(base, commit="v1"), notes).commit == first
    unresolved = _pin_ref(dataclasses.replace(base, commit="no-such-ref"), notes)
    assert unresolved.commit == "no-such-ref" and "not pinned" in notes[-1]
    assert _pin_ref(dataclasses.replace(base, commit=first[:9]), notes).commit == first[:9]


def test_build_tree_staging_keeps_inner_links_and_resolves_outer_ones(monkeypatch, tmp_path):
    from runner.docker.image import plan_build

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    tree = tmp_path / "build"
    src = tmp_path / "iree-src"  # the source checkout a real tree's bindings link into
    compiler = tree / "compiler/bindings/python/iree/compiler"
    runtime = tree / "runtime/bindings/python/iree/runtime"
    for d in (compiler / "_mlir_libs", runtime, tree / "tools/CMakeFiles", src, tree / "lib"):
        d.mkdir(parents=True)
    (compiler / "_mlir_libs" / "iree-compile").write_text("binary")
    (compiler / "__init__.py").write_text("")
    (compiler / "version.py").write_text('VERSION = "3.99.0"\nREVISIONS = {"IREE": "abc"}\n')
    (runtime / "__init__.py").write_text("")
    (src / "api.py").write_text("from the source tree")
    (compiler / "api.py").symlink_to(src / "api.py")
    (tree / "tools" / "iree-compile").symlink_to(
        "../compiler/bindings/python/iree/compiler/_mlir_libs/iree-compile")
    (tree / "tools" / "gone").symlink_to(tmp_path / "missing")
    (tree / "tools" / "CMakeFiles" / "x.o").write_text("")
    (tree / "tools" / "obj.o").write_text("")
    (tree / "lib" / "libIREECompiler.so").write_text("lib")
    (tree / "not-staged").mkdir()

    project = tmp_path / "project"  # a fixed project: the live checkout may change meanwhile
    (project / "runner").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    (project / "runner" / "__init__.py").write_text("")
    plan = plan_build(parse_source(f"build-dir:{tree}"), client=None, require_base=False,
                      project_dir=project)
    staged = plan.context_dir / "iree-build"
    link = staged / "tools" / "iree-compile"
    assert link.is_symlink() and link.read_text() == "binary"  # still a link, still resolves
    api = staged / "compiler/bindings/python/iree/compiler/api.py"
    assert not api.is_symlink() and api.read_text() == "from the source tree"
    assert not (staged / "tools" / "gone").exists()
    assert not (staged / "tools" / "CMakeFiles").exists()
    assert not (staged / "tools" / "obj.o").exists()
    assert (staged / "lib" / "libIREECompiler.so").read_text() == "lib"
    assert not (staged / "not-staged").exists()
    assert any("dangling symlink" in n for n in plan.notes)
    assert plan.tag.startswith("iree-sdxl-runner:build-dir-3.99.0-")
    assert plan.labels["org.iree-sdxl-runner.iree.commit"] == "abc"
    # The host path is not an input: the same tree elsewhere is the same image.
    moved = tmp_path / "elsewhere"
    tree.rename(moved)
    again = plan_build(parse_source(f"build-dir:{moved}"), client=None, require_base=False,
                       project_dir=project)
    assert again.inputs_hash == plan.inputs_hash
