"""Accuracy, the networks: our FID InceptionV3 and CLIP scorer against the public packages MLPerf
runs (pytorch-fid, open_clip, torchmetrics) with identical seeded weights and inputs, and the
weights files' checks. No pretrained weights reach this machine, so identical random weights
are the proof of equivalence available here."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
open_clip = pytest.importorskip("open_clip")

from runner.accuracy import backbones as bb  # noqa: E402
from runner.accuracy.clip_score import ClipScorer, cosine_scores  # noqa: E402
from runner.accuracy.inception import images_to_unit_float  # noqa: E402
from runner.base.errors import RunnerError  # noqa: E402
from runner.config.mlperf_data import load_captions  # noqa: E402

SEED = 0


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """Six 128x128 images with structure (gradients + noise), like the tiny model's."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:128, 0:128] / 127.0
    out = []
    for k in range(6):
        base = np.stack([xx * (k + 1) % 1.0, yy, (xx + yy) / 2], -1) * 255
        out.append(np.clip(base + rng.normal(0, 20 * k, base.shape), 0, 255))
    return np.stack(out).round().astype(np.uint8)


@pytest.fixture(scope="module")
def captions() -> list[str]:
    c = load_captions()
    return [c[i] for i in range(6)]


@pytest.fixture(scope="module")
def inception():
    return bb.seeded_inception(SEED)


@pytest.fixture(scope="module")
def clip():
    return bb.seeded_clip(SEED)


# -- FID InceptionV3 ---------------------------------------------------------------------------

@pytest.mark.slow
def test_inception_features_equal_pytorch_fids_with_identical_weights(tmp_path, inception,
                                                                      images):
    """pytorch-fid's InceptionV3 (MLPerf's copy is the same code) loads the FID weights via
    torch hub's cache; put our seeded weights there under the published file name."""
    from torchvision.transforms import ToTensor

    pfid = pytest.importorskip("pytorch_fid.inception")
    from PIL import Image

    hub = torch.hub.get_dir()
    try:
        torch.hub.set_dir(str(tmp_path))
        (tmp_path / "checkpoints").mkdir()
        torch.save(inception.state_dict(), tmp_path / "checkpoints" / bb.FID_WEIGHTS.name)
        theirs = pfid.InceptionV3([pfid.InceptionV3.BLOCK_INDEX_BY_DIM[2048]]).eval()
    finally:
        torch.hub.set_dir(hub)
    # MLPerf's input path: PIL image -> ToTensor; ours: numpy -> float32 / 255.
    mlperf_in = torch.stack([ToTensor()(Image.fromarray(i).convert("RGB")) for i in images])
    ours_in = images_to_unit_float(images)
    assert torch.equal(mlperf_in, ours_in)
    with torch.no_grad():
        expected = theirs(mlperf_in)[0].squeeze(3).squeeze(2)
        got = inception(ours_in)
        one_by_one = torch.cat([inception(ours_in[i : i + 1]) for i in range(len(images))])
    assert got.shape == (len(images), 2048)
    assert torch.equal(got, expected)
    assert torch.equal(one_by_one, got)  # batch size does not change features on CPU
    # The features see the images: different images, different features.
    assert (got[0] - got[-1]).abs().max() > 1e-3 * got.abs().max()


@pytest.mark.slow
def test_seeded_inception_is_reproducible_and_has_o1_activations(inception, images):
    again = bb.seeded_inception(SEED)
    assert bb.state_fingerprint(again) == bb.state_fingerprint(inception)
    assert bb.state_fingerprint(bb.seeded_inception(SEED + 1)) != bb.state_fingerprint(again)
    with torch.no_grad():
        f = inception(images_to_unit_float(images))
    assert torch.isfinite(f).all() and 1e-3 < f.abs().mean() < 10


# -- CLIP --------------------------------------------------------------------------------------

def mlperf_clip_score(model, preprocess, caption: str, image: np.ndarray) -> float:
    """MLPerf's CLIPEncoder.get_clip_score, step for step, on open_clip directly."""
    from PIL import Image

    with torch.no_grad():
        x = preprocess(Image.fromarray(image)).unsqueeze(0)
        image_features = model.encode_image(x).float()
        image_features /= image_features.norm(dim=-1, keepdim=True)
        text = open_clip.tokenize([caption])
        text_features = model.encode_text(text).float()
        text_features /= text_features.norm(dim=-1, keepdim=True)
        return 100 * (image_features @ text_features.T).item()


@pytest.mark.slow
def test_clip_scores_equal_mlperfs_open_clip_computation(clip, images, captions):
    model, preprocess, tokenizer = clip
    scorer = ClipScorer(model, preprocess, tokenizer)
    expected = [mlperf_clip_score(model, preprocess, c, i) for c, i in zip(captions, images,
                                                                            strict=True)]
    one = np.concatenate([scorer.scores(images[i : i + 1], captions[i : i + 1])
                          for i in range(len(images))])
    assert one.tolist() == expected  # batch 1: bit-identical to MLPerf's
    batched = scorer.scores(images, captions)
    np.testing.assert_allclose(batched, expected, rtol=0, atol=1e-5)
    assert float(np.mean(one)) == float(np.mean(expected))


def test_tokenizer_is_open_clips_tokenize(clip, captions):
    _, _, tokenizer = clip
    assert torch.equal(tokenizer(captions), open_clip.tokenize(captions))


def test_clip_of_identical_embeddings_is_100():
    rng = np.random.default_rng(1)
    e = torch.from_numpy(rng.standard_normal((5, 512)).astype(np.float32))
    e = e / e.norm(dim=-1, keepdim=True)
    np.testing.assert_allclose(cosine_scores(e, e), 100.0, rtol=1e-6)
    np.testing.assert_allclose(cosine_scores(e, -e), -100.0, rtol=1e-6)


@pytest.mark.slow
def test_clip_matches_torchmetrics_clip_score_with_the_same_model(clip, images, captions):
    """torchmetrics' CLIPScore accepts any (model, processor) with the HF interface; wrap the
    same open_clip model and compare its per-sample formula with ours."""
    from torchmetrics.functional.multimodal.clip_score import _clip_score_update
    from torchvision.transforms.functional import to_pil_image

    model, preprocess, tokenizer = clip

    class HfLikeModel:
        config = None

        def get_image_features(self, pixel_values):
            return model.encode_image(pixel_values)

        def get_text_features(self, input_ids, attention_mask):
            return model.encode_text(input_ids)

        def to(self, device):
            return self

    def processor(text=None, images=None, return_tensors="pt", padding=True):
        if images is not None:
            return {"pixel_values": torch.stack([preprocess(to_pil_image(i)) for i in images])}
        ids = tokenizer(text)
        return {"input_ids": ids, "attention_mask": (ids != 0).long()}

    chw = [torch.from_numpy(i).permute(2, 0, 1) for i in images]
    with torch.no_grad():
        theirs, n = _clip_score_update(chw, captions, HfLikeModel(), processor)
    ours = ClipScorer(model, preprocess, tokenizer).scores(images, captions)
    assert n == len(images)
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=0, atol=1e-4)


@pytest.mark.slow
def test_seeded_clip_scores_move_when_images_change(clip, images, captions):
    """A random ViT-B-32 could embed every image alike; check ours does not."""
    scorer = ClipScorer(*clip)
    a = scorer.scores(images, captions)
    b = scorer.scores(images[::-1].copy(), captions)
    flat = scorer.scores(np.full_like(images, 128), captions)
    assert np.abs(a - b).max() > 0.01 and np.abs(a - flat).max() > 0.01
    emb = scorer.image_embeddings(images)
    assert (emb @ emb.T).min() < 0.9999  # not one direction for every image


# -- weights files -----------------------------------------------------------------------------

def test_missing_weights_error_names_all_three_places(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RUNNER_FID_WEIGHTS", raising=False)
    with pytest.raises(RunnerError) as e:
        bb.find_weights(bb.FID_WEIGHTS)
    msg = str(e.value)
    for place in ("--fid-weights", "$RUNNER_FID_WEIGHTS",
                  str(tmp_path / "cache" / "mlperf" / bb.FID_WEIGHTS.name),
                  bb.FID_WEIGHTS.url, bb.FID_WEIGHTS.sha256):
        assert place in msg
    monkeypatch.setenv("RUNNER_CLIP_WEIGHTS", str(tmp_path / "nope.pt"))
    with pytest.raises(RunnerError, match=r"from \$RUNNER_CLIP_WEIGHTS"):
        bb.find_weights(bb.CLIP_WEIGHTS)
    with pytest.raises(RunnerError, match="from --clip-weights"):
        bb.find_weights(bb.CLIP_WEIGHTS, tmp_path / "also-nope.pt")


def test_weights_with_the_wrong_checksum_are_refused(tmp_path, monkeypatch):
    fake = tmp_path / bb.FID_WEIGHTS.name
    fake.write_bytes(b"truncated download")
    monkeypatch.setenv("RUNNER_FID_WEIGHTS", str(fake))
    assert bb.find_weights(bb.FID_WEIGHTS) == fake
    with pytest.raises(RunnerError, match="is not the published file's 6726825d0af5"):
        bb.load_backbones("pretrained", fid_weights=fake, clip_weights=fake)
    with pytest.raises(RunnerError, match=r"accuracy\.backbones"):
        bb.load_backbones("random")


@pytest.mark.slow
def test_pretrained_path_loads_weights_files(tmp_path, inception, clip, images, captions):
    """The real loading code (checksum, strict state dict, OpenAI's TorchScript archive with
    fp16 tensors) on files we made, with their own checksums standing in for the published
    ones; the scores equal the seeded networks' (with CLIP weights rounded to fp16 as
    OpenAI's file stores them)."""
    from runner.base.fileio import sha256_file

    fid_path = tmp_path / bb.FID_WEIGHTS.name
    torch.save(inception.state_dict(), fid_path)
    clip_model = bb.seeded_clip(SEED)[0]
    clip_path = tmp_path / bb.CLIP_WEIGHTS.name
    torch.jit.save(torch.jit.script(clip_model.half()), str(clip_path))
    loaded = bb.load_backbones("pretrained", fid_weights=fid_path, clip_weights=clip_path,
                               fid_sha256=sha256_file(fid_path),
                               clip_sha256=sha256_file(clip_path))
    assert loaded.info.mode == "pretrained" and loaded.info.fid_weights == sha256_file(fid_path)
    assert loaded.info.fid_fingerprint == bb.state_fingerprint(inception)
    assert "not comparable" not in loaded.info.label
    x = images_to_unit_float(images[:2])
    with torch.no_grad():
        assert torch.equal(loaded.inception(x), inception(x))
    assert next(loaded.clip.model.parameters()).dtype == torch.float32
    rounded = bb.seeded_clip(SEED)
    rounded[0].half().float()
    np.testing.assert_array_equal(loaded.clip.scores(images[:2], captions[:2]),
                                  ClipScorer(*rounded).scores(images[:2], captions[:2]))
    # A CLIP file of another architecture is refused by the strict load.
    wrong = tmp_path / "wrong.pt"
    torch.save({"visual.proj": torch.zeros(3)}, wrong)
    with pytest.raises(RunnerError, match="not a CLIP ViT-B-32 state dict"):
        bb.load_backbones("pretrained", fid_weights=fid_path, clip_weights=wrong,
                          fid_sha256=sha256_file(fid_path), clip_sha256=sha256_file(wrong))


def test_fid_alone_needs_only_the_fid_weights_file(tmp_path, monkeypatch, inception):
    """What many IREE developers have: TF-FID's Inception file and no CLIP weights. FID
    alone loads it and never looks for CLIP's; both stop at the missing CLIP file."""
    from runner.base.fileio import sha256_file

    monkeypatch.setenv("RUNNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RUNNER_CLIP_WEIGHTS", raising=False)
    monkeypatch.delenv("RUNNER_FID_WEIGHTS", raising=False)
    fid_path = tmp_path / bb.FID_WEIGHTS.name
    torch.save(inception.state_dict(), fid_path)
    loaded = bb.load_backbones("pretrained", fid_weights=fid_path,
                               fid_sha256=sha256_file(fid_path), metrics=("fid",))
    assert loaded.clip is None and loaded.inception is not None
    assert loaded.info.fid_weights == sha256_file(fid_path)
    assert (loaded.info.clip_weights, loaded.info.clip_fingerprint, loaded.info.clip_path) == (
        None, None, None)
    with pytest.raises(RunnerError, match="CLIP ViT-B-32 openai weights not found"):
        bb.load_backbones("pretrained", fid_weights=fid_path, fid_sha256=sha256_file(fid_path))
    # CLIP alone never looks for the (absent) FID file: it goes straight to the CLIP one.
    with pytest.raises(RunnerError, match="CLIP ViT-B-32 openai weights: sha256"):
        bb.load_backbones("pretrained", metrics=("clip",), clip_weights=fid_path)


@pytest.mark.slow
def test_seeded_backbones_are_built_once_per_seed_and_metrics():
    """Scoring runs, builds or steps in one process shares the seeded networks (they are the
    same for a seed); another seed or another metric set is another pair."""
    both = bb.load_backbones("seeded", SEED)
    assert bb.load_backbones("seeded", SEED) is both
    clip_only = bb.load_backbones("seeded", SEED, metrics=("clip",))
    assert clip_only is not both and clip_only.inception is None
    assert clip_only.info.clip_fingerprint == both.info.clip_fingerprint
    assert bb.load_backbones("seeded", SEED + 1, metrics=("clip",)).info.clip_fingerprint != \
        both.info.clip_fingerprint
