"""A seeded export's weights: the spec derived from the modules as torch initialized them,
and the values written from it loaded back into those modules, so what is traced, what the
`.irpa` holds and what `ensure_weights` writes elsewhere are the same numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from runner.base.errors import StepFailed
from runner.model.seeded_weights import (
    SeededTensor,
    WeightsSpec,
    generate_seeded,
    tensor_spec,
    write_archive,
)


def _saveable(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and persistent buffers by the names iree-turbine externalizes them as
    (`aot.externalize_module_parameters`: the state_dict's names)."""
    state = module.state_dict(keep_vars=True)
    seen: dict[int, str] = {}
    for name, t in state.items():
        first = seen.setdefault(t.data_ptr(), name)
        if first != name and t.numel():
            raise StepFailed(f"{name} shares its storage with {first}: tied weights cannot "
                             "be seeded tensor by tensor", where=name,
                             fix="seed the shared tensor once and tie it after loading, or "
                             "export the model from a checkpoint")
    return state


def seed_modules(modules: dict[str, nn.Module], seed: int) -> WeightsSpec:
    """`modules` (archive file name -> module) get the values their spec generates, tensor
    by tensor, written over torch's in the modules' own storage (a full-size model is never
    held twice, nor allocated again); returns the spec."""
    archives: dict[str, tuple[SeededTensor, ...]] = {}
    states = {archive: _saveable(module) for archive, module in modules.items()}
    largest = max((t.numel() for state in states.values() for t in state.values()), default=0)
    scratch = np.empty(largest)  # float64: every tensor's statistics computed in it
    for archive, state in states.items():
        tensors = tuple(tensor_spec(name, t.detach().cpu().numpy(), scratch)
                        for name, t in state.items())
        for t in state.values():
            if not t.is_contiguous():
                t.data = t.data.contiguous()
        # into the module's storage, the archive's tensors in one call: one thread pool and
        # its scratch blocks for them all, not one per tensor (2535 in a full-size SDXL)
        generate_seeded(tensors, seed, out=[t.detach().numpy() for t in state.values()])
        archives[archive] = tensors
    return WeightsSpec(seed, archives)


def save_seeded_weights(module: nn.Module, tensors: tuple[SeededTensor, ...], path: Path) -> str:
    """The `.irpa` of a seeded module through the spec's own writer: byte for byte what
    `ensure_weights` writes from the spec on any other machine. Returns its sha256."""
    state = _saveable(module)
    arrays = [np.ascontiguousarray(state[t.name].detach().numpy()) for t in tensors]
    return write_archive(tensors, arrays, path)
