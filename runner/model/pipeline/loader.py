"""Opens a compiled model in this process: one session, modules loaded once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from runner.config.model_config import ModelConfig
from runner.model.compiled_model import CompiledModel
from runner.model.pipeline.iree_session import IreeSession
from runner.model.pipeline.sdxl import SdxlPipeline


@contextlib.contextmanager
def open_pipeline(compiled: CompiledModel, extra_runtime_flags: Sequence[str] = (),
                  latent: np.ndarray | None = None) -> Iterator[SdxlPipeline]:
    """The compiled model's pipeline for a `with` block, on a session of its own, closed on
    the way out, also when loading its modules failed. Closing empties every function
    the pipeline holds, so an error that outlives the block (kept by a caller, or in a
    reference cycle the garbage collector frees later) keeps no runtime object from its
    frames: freed after their device, those deadlock IREE's runtime (`clear_frames`)."""
    session = IreeSession(compiled.driver, (*compiled.runtime_flags, *extra_runtime_flags))
    try:
        for files in compiled.modules:
            session.load(files)
        config = ModelConfig.load(Path(compiled.model_config))
        yield SdxlPipeline(config, session, compiled.batch_size, compiled.vae_batch_size,
                           latent)
    finally:
        session.close()
