"""The embedded tiny SDXL: SDXL's own modules (`sdxl_model`) with tiny configs and seeded
weights. 16x16 latents -> 128x128 images; the vocabulary is learned from the captions.
"""

from __future__ import annotations

from runner.config.architecture import TINY_HIDDEN_1 as HIDDEN_1
from runner.config.architecture import TINY_HIDDEN_2 as HIDDEN_2
from runner.config.architecture import TINY_IMAGE_SIZE as IMAGE_SIZE
from runner.config.architecture import TINY_LATENT_SIZE as LATENT_SIZE
from runner.config.architecture import TINY_POOLED as POOLED
from runner.config.architecture import sdxl_architecture
from runner.config.architecture import tiny_architecture as architecture
from runner.config.exports import STEPS  # MLPerf's, as the SDXL export's
from runner.model.export.sdxl_model import SdxlModules, build_seeded
from runner.model.export.sdxl_model import scheduler as euler_scheduler

# The sizes and the architecture live in runner.config.architecture (torch-free, so a
# profile naming `seeded:tiny` loads without torch); the names here are the same ones.
__all__ = ["HIDDEN_1", "HIDDEN_2", "IMAGE_SIZE", "LATENT_SIZE", "POOLED", "architecture",
           "build", "scheduler"]

TINY_SEED = 20251122
VOCAB_MERGES = 510  # 512 byte symbols + 510 merges + BOS + EOS = 1024 ids


def scheduler(steps: int = STEPS):
    """EulerDiscrete with SDXL base 1.0's scheduler config (as MLPerf uses it)."""
    return euler_scheduler(sdxl_architecture().scheduler, steps)


def build(bos: int, eos: int, vocab_size: int, max_length: int) -> SdxlModules:
    """Seeded construction: the same call always gives the same weights."""
    return build_seeded(architecture(bos, eos, vocab_size, max_length), TINY_SEED, "float32", STEPS)
