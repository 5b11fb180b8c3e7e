"""MLPerf's CLIP score: 100 x cosine of L2-normalised image and caption embeddings, averaged.

MLPerf's encoder (text_to_image/tools/clip/clip_encoder.py) runs open_clip `ViT-B-32` with the
`openai` weights one sample at a time: the PIL image through open_clip's own validation
transform, the caption through `open_clip.tokenize`, both embeddings cast to float32 and
divided by their norms, their dot product times 100 as a Python float; the score is `np.mean`
of those floats. `ClipScorer` does the same on batches; a batch of one is MLPerf's exact
sequence of operations, and on CPU larger batches give bit-identical embeddings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runner.base.errors import StepFailed

MODEL_NAME = "ViT-B-32"
PRETRAINED_TAG = "openai"


def openai_preprocess_kwargs() -> dict[str, Any]:
    """The preprocessing open_clip attaches to the `openai` tag (mean/std, bicubic, shortest
    side), so a model built without downloading gets the transform `pretrained='openai'` would."""
    from open_clip.pretrained import get_pretrained_cfg

    cfg = get_pretrained_cfg(MODEL_NAME, PRETRAINED_TAG)
    return {"image_mean": cfg["mean"], "image_std": cfg["std"],
            "image_interpolation": cfg["interpolation"], "image_resize_mode": cfg["resize_mode"]}


def build_clip():
    """(model, preprocess, tokenizer) for ViT-B-32 with the openai tag's QuickGELU and
    preprocessing, randomly initialised from torch's global generator (callers seed it or
    load weights over it)."""
    import logging

    import open_clip

    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)  # open_clip warns "initialized randomly"; weights come next
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            MODEL_NAME, pretrained=None, force_quick_gelu=True, **openai_preprocess_kwargs())
    finally:
        logger.setLevel(level)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, preprocess, open_clip.get_tokenizer(MODEL_NAME)


class ClipScorer:
    def __init__(self, model, preprocess, tokenizer, device: str = "cpu"):
        self.model, self.preprocess, self.tokenizer = model, preprocess, tokenizer
        self.device = device

    def pixels(self, images: np.ndarray):
        """uint8 N x H x W x 3 -> the model's input, via PIL as MLPerf feeds it."""
        import torch
        from PIL import Image

        return torch.stack([self.preprocess(Image.fromarray(img)) for img in images])

    def _normalised(self, features, what: str):
        features = features.float()
        norms = features.norm(dim=-1, keepdim=True)
        if not bool(norms.isfinite().all()) or bool((norms == 0).any()):
            raise StepFailed(f"CLIP {what} embedding is zero or not finite",
                             fix="check the CLIP weights file (NaN/Inf weights?) and the inputs")
        return features / norms

    def image_embeddings(self, images: np.ndarray):
        return self.pixel_embeddings(self.pixels(images).to(self.device))

    def pixel_embeddings(self, pixels):
        """From `pixels`' output (on the device): the forward pass alone."""
        import torch

        with torch.no_grad():
            return self._normalised(self.model.encode_image(pixels), "image")

    def text_embeddings(self, captions: Sequence[str]):
        import torch

        with torch.no_grad():
            tokens = self.tokenizer(list(captions)).to(self.device)
            return self._normalised(self.model.encode_text(tokens), "text")

    def scores(self, images: np.ndarray, captions: Sequence[str]) -> np.ndarray:
        """Per-sample 100 x cosine, float64 (MLPerf: `100 * similarity.item()`)."""
        return self.scores_of_pixels(self.pixels(images).to(self.device), captions)

    def scores_of_pixels(self, pixels, captions: Sequence[str]) -> np.ndarray:
        """`scores` with the image preprocessing already done (a loader thread does it)."""
        return cosine_scores(self.pixel_embeddings(pixels), self.text_embeddings(captions))


def cosine_scores(image_features, text_features) -> np.ndarray:
    """100 x the float32 dot product of normalised embeddings, one (1 x D) @ (D x 1) product
    per sample as MLPerf computes it, widened to float64 before the x100."""
    if image_features.shape != text_features.shape:
        raise StepFailed(f"{image_features.shape[0]} images but {text_features.shape[0]} "
                         "captions", fix="score images and captions of the same sample ids")
    sim = (image_features[:, None, :] @ text_features[:, :, None]).reshape(-1)
    return 100 * sim.cpu().numpy().astype(np.float64)
