"""Opens a compiled model in this process: one session, modules loaded once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from runner.config.model_config import ModelConfig
from runner.model.compiled_model import CompiledModel
from runner.model.pipeline.iree_session import IreeSession
from runner.model.pipeline.sdxl import SdxlPipeline


def open_pipeline(compiled: CompiledModel, extra_runtime_flags: Sequence[str] = (),
                  latent: np.ndarray | None = None) -> tuple[IreeSession, SdxlPipeline]:
    session = IreeSession(compiled.driver, (*compiled.runtime_flags, *extra_runtime_flags))
    for files in compiled.modules:
        session.load(files)
    config = ModelConfig.load(Path(compiled.model_config))
    return session, SdxlPipeline(config, session, compiled.batch_size, compiled.vae_batch_size,
                                 latent)
