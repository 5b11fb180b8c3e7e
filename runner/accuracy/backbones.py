"""The two scoring networks: MLPerf's pretrained weights from local files, or seeded random ones.

`pretrained` (the sdxl profiles) loads the published files and checks their sha256 against
the values the projects publish, so a truncated download or another checkpoint fails loudly
instead of shifting FID by more than a submission's margin:
- FID InceptionV3 `pt_inception-2015-12-05-6726825d.pth` (pytorch-fid's release; torch hub
  names files by their hash prefix; the full sha256 is the one torch-fidelity pins);
- CLIP ViT-B-32 `ViT-B-32.pt`, OpenAI's archive (OpenAI's URL path is its sha256, which
  OpenAI's own loader checks; open_clip's `openai` tag points at the same URL).

`seeded` (the tiny profile: no pretrained weights reach this machine) builds the same two
architectures with random weights from a fixed seed. Scores are then only comparable with
scores from the same seeded networks, which is why every result carries the label and a
fingerprint of the weights, and why statistics written with one are refused by another.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.accuracy.files import SCORING_SUBDIR, find_scoring_file, scoring_file_places
from runner.base.errors import BadInput, StepFailed
from runner.base.fileio import sha256_file
from runner.config.profile import METRICS

BACKBONE_MODES = ("pretrained", "seeded")
SEEDED_LABEL = "seeded random backbones: not comparable with MLPerf"


@dataclass(frozen=True)
class BackboneWeights:
    """Where a scoring network's pretrained weights come from, and their digest."""

    what: str
    name: str
    sha256: str
    url: str
    env: str
    flag: str

    @property
    def cache_name(self) -> str:
        """The file's name inside a cache (runner.accuracy.files looks it up)."""
        return f"{SCORING_SUBDIR}/{self.name}"


FID_WEIGHTS = BackboneWeights(
    what="FID InceptionV3 weights", name="pt_inception-2015-12-05-6726825d.pth",
    sha256="6726825d0af5f729cebd5821db510b11b1cfad8faad88a03f1befd49fb9129b2",
    url="https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
        "pt_inception-2015-12-05-6726825d.pth",
    env="RUNNER_FID_WEIGHTS", flag="--fid-weights")
# OpenAI publishes each CLIP checkpoint under its own sha256: the digest is spelled once.
_CLIP_SHA256 = "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af"
CLIP_WEIGHTS = BackboneWeights(
    what="CLIP ViT-B-32 openai weights", name="ViT-B-32.pt", sha256=_CLIP_SHA256,
    url=f"https://openaipublic.azureedge.net/clip/models/{_CLIP_SHA256}/ViT-B-32.pt",
    env="RUNNER_CLIP_WEIGHTS", flag="--clip-weights")


def find_weights(spec: BackboneWeights, explicit: str | Path | None = None) -> Path:
    """The flag's path, else the env var's, else the caches in the order every scoring file
    is looked up (runner.accuracy.files); an error names each place."""
    if explicit or os.environ.get(spec.env):
        path, origin = ((Path(explicit).expanduser(), spec.flag) if explicit
                        else (Path(os.environ[spec.env]).expanduser(), f"${spec.env}"))
        if path.is_file():
            return path
        raise BadInput(f"{spec.what} not found at {path} (from {origin})", where=spec.flag,
                       fix=f"{_download(spec)} and pass it with {spec.flag} PATH, set "
                       f"${spec.env}, or save it as {scoring_file_places(spec.cache_name)[0]}")
    return find_scoring_file(spec.cache_name, spec.what, spec.flag,
                             f"{_download(spec)} and pass it with {spec.flag} PATH, set "
                             f"${spec.env}")


def _download(spec: BackboneWeights) -> str:
    return f"download {spec.url} (sha256 {spec.sha256})"


def backbone_weights(mode: str, metrics: tuple[str, ...], fid_weights: str | Path | None = None,
                     clip_weights: str | Path | None = None) -> list[Path]:
    """The weights files scoring `metrics` loads (found where `load_backbones` finds them,
    not read); none for seeded backbones."""
    explicit = {FID_WEIGHTS: fid_weights, CLIP_WEIGHTS: clip_weights}
    return [find_weights(spec, explicit[spec]) for spec in weight_specs(mode, metrics)]


def weight_specs(mode: str, metrics: tuple[str, ...]) -> list[BackboneWeights]:
    """The pretrained weights scoring `metrics` needs; none for seeded backbones."""
    if mode != "pretrained":
        return []
    return [spec for metric, spec in (("fid", FID_WEIGHTS), ("clip", CLIP_WEIGHTS))
            if metric in metrics]


def verify_weights(path: Path, spec: BackboneWeights, expected_sha256: str | None = None) -> str:
    expected = expected_sha256 or spec.sha256
    actual = sha256_file(path)
    if actual != expected:
        raise BadInput(
            f"{spec.what}: sha256 {actual} is not the published file's {expected}",
            where=str(path),
            fix=f"download {spec.url} again (a partial download or another checkpoint gives "
                "scores MLPerf would not)")
    return actual


def state_fingerprint(module) -> str:
    """sha256 over names, dtypes, shapes and bytes of a state dict: identifies seeded weights
    across runs (a torch whose generator draws differently changes it)."""
    h = hashlib.sha256()
    for key, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class BackboneInfo:
    """`fid_*` / `clip_*` are None for a network not loaded (its metric not scored)."""

    mode: str
    seed: int | None
    fid_weights: str | None  # sha256 of the file, or "seeded:<seed>"
    clip_weights: str | None
    fid_fingerprint: str | None
    clip_fingerprint: str | None
    fid_path: str | None = None
    clip_path: str | None = None

    @property
    def label(self) -> str:
        if self.mode == "seeded":
            return f"{SEEDED_LABEL} (seed {self.seed})"
        return "pretrained: FID InceptionV3 2015-12-05, CLIP ViT-B-32 openai (MLPerf's)"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "seed": self.seed, "label": self.label,
                "fid_weights": self.fid_weights, "clip_weights": self.clip_weights,
                "fid_fingerprint": self.fid_fingerprint,
                "clip_fingerprint": self.clip_fingerprint,
                "fid_path": self.fid_path, "clip_path": self.clip_path}


@dataclass(frozen=True)  # shared: load_backbones hands out one per seed
class Backbones:
    inception: Any  # FidInceptionV3, in eval mode on `device`; None when FID is not scored
    clip: Any  # ClipScorer; None when CLIP is not scored
    info: BackboneInfo
    device: str


def _device(device: str) -> str:
    import torch

    if device not in ("cpu", "cuda"):
        raise BadInput(f"unknown device {device!r}", where="--device", fix="use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise StepFailed("--torch-device cuda, but torch sees no CUDA device",
                         where="--torch-device",
                         fix="use --torch-device cpu, or install a CUDA build of torch")
    return device


def _load_inception(path: Path, expected_sha256: str | None):
    import torch

    from runner.accuracy.inception import build_fid_inception

    sha = verify_weights(path, FID_WEIGHTS, expected_sha256)
    model = build_fid_inception()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    except (RuntimeError, OSError, ValueError, TypeError) as e:
        raise BadInput(f"not the FID InceptionV3 state dict: {str(e)[:300]}",
                       where=str(path), fix=f"use {FID_WEIGHTS.url}") from e
    return model, sha


def read_clip_state_dict(path: Path) -> dict:
    """OpenAI's TorchScript archive (fp16 tensors; open_clip's own loader reads it the same
    way) or a plain state dict with the same keys."""
    import torch

    try:
        state = torch.jit.load(str(path), map_location="cpu").state_dict()
    except RuntimeError:
        state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise BadInput("not a state dict", where=str(path), fix=f"use {CLIP_WEIGHTS.url}")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    # OpenAI's archive stores three config scalars; a TorchScript copy of open_clip's model
    # also saves its (non-persistent, constant) causal attention mask.
    for key in ("input_resolution", "context_length", "vocab_size", "attn_mask"):
        state.pop(key, None)
    return state


def _load_clip(path: Path, expected_sha256: str | None):
    from runner.accuracy.clip_score import build_clip

    sha = verify_weights(path, CLIP_WEIGHTS, expected_sha256)
    model, preprocess, tokenizer = build_clip()
    try:
        model.load_state_dict(read_clip_state_dict(path), strict=True)
    except (RuntimeError, OSError, ValueError, TypeError) as e:
        raise BadInput(f"not a CLIP ViT-B-32 state dict: {str(e)[:300]}", where=str(path),
                       fix=f"use {CLIP_WEIGHTS.url}") from e
    return (model, preprocess, tokenizer), sha


def seeded_inception(seed: int):
    from runner.accuracy.inception import build_fid_inception, seeded_init

    model = build_fid_inception()
    seeded_init(model, seed)
    return model


def seeded_clip(seed: int):
    """open_clip's own initialisation of ViT-B-32, drawn from torch's generator seeded with
    `seed` (the caller's global RNG state is restored afterwards)."""
    import torch

    from runner.accuracy.clip_score import build_clip

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_clip()


def load_backbones(mode: str, seed: int = 0, fid_weights: str | Path | None = None,
                   clip_weights: str | Path | None = None, device: str = "cpu", *,
                   fid_sha256: str | None = None, clip_sha256: str | None = None,
                   metrics: tuple[str, ...] = METRICS) -> Backbones:
    """The networks of `metrics` only: scoring FID alone needs no CLIP weights file, and
    CLIP alone no Inception. `fid_sha256` / `clip_sha256` replace the published checksums
    (tests load files of their own through the real path with them); nothing on the command
    line sets them."""
    device = _device(device)
    if mode not in BACKBONE_MODES:
        raise BadInput(f"`accuracy.backbones` is {mode!r}", where="accuracy.backbones",
                       fix=f"use one of {', '.join(BACKBONE_MODES)}")
    if mode == "seeded":  # the same networks for a seed: built once in a process
        key = (seed, device, tuple(m for m in METRICS if m in metrics))
        if key not in _SEEDED:
            _SEEDED[key] = _load(mode, seed, None, None, device, None, None, metrics)
        return _SEEDED[key]
    return _load(mode, seed, fid_weights, clip_weights, device, fid_sha256, clip_sha256,
                 metrics)


# Seeded networks by (seed, device, metrics): scoring several runs, builds or steps in one
# process builds them (seconds, and a hash of their 700 MB of weights) once.
_SEEDED: dict[tuple[int, str, tuple[str, ...]], Backbones] = {}


def _load(mode: str, seed: int, fid_weights: str | Path | None,
          clip_weights: str | Path | None, device: str, fid_sha256: str | None,
          clip_sha256: str | None, metrics: tuple[str, ...]) -> Backbones:
    from runner.accuracy.clip_score import ClipScorer

    inception = clip = None
    fid_id = clip_id = fid_path = clip_path = None
    if mode == "pretrained":
        if "fid" in metrics:
            found = find_weights(FID_WEIGHTS, fid_weights)
            inception, fid_id = _load_inception(found, fid_sha256)
            fid_path = str(found)
        if "clip" in metrics:
            found = find_weights(CLIP_WEIGHTS, clip_weights)
            clip, clip_id = _load_clip(found, clip_sha256)
            clip_path = str(found)
        used_seed = None
    else:
        if "fid" in metrics:
            inception, fid_id = seeded_inception(seed), f"seeded:{seed}"
        if "clip" in metrics:
            clip, clip_id = seeded_clip(seed), f"seeded:{seed}"
        used_seed = seed
    info = BackboneInfo(mode, used_seed, fid_id, clip_id,
                        None if inception is None else state_fingerprint(inception),
                        None if clip is None else state_fingerprint(clip[0]),
                        fid_path, clip_path)
    scorer = None
    if clip is not None:
        clip_model, preprocess, tokenizer = clip
        scorer = ClipScorer(clip_model.to(device), preprocess, tokenizer, device)
    return Backbones(None if inception is None else inception.to(device), scorer, info,
                     device)
