"""What an IREE dispatch function's name says: its kind, and a key that outlives renumbering.

IREE's compiler names every dispatch function `<function>_dispatch_<N>_<summary>` (its
AnnotateDispatches pass): `<function>` the exported function it was outlined from
(`run_forward$async`, `main$async`), `<N>` its ordinal in the module, `<summary>` the op
the pass's cost model finds most expensive in it, with loop ranges and element types:
`matmul_128x512x64_f32`, `conv_2x32x16x16x96x3x3_f32`, `attention_2x4x64x16x16x64`,
`elementwise_broadcast_2x64x16x16_f32`, `reduction_16x3072_f32`, `slow_memcpy` (a dispatch
that only copies). A `linalg.generic` gets the category the pass infers (`elementwise`,
`elementwise_transpose`, `elementwise_broadcast`, `matvec_like`, `matmul_like`, `contract`,
`conv`, `reduction`, `transpose`); a named op its own name (`batch_matmul`,
`conv_2d_nhwc_hwcf`, `softmax`, `fill`, `pack`, `set_encoding_LHS_...`); a dispatch that
unpacks first / packs last is written `unpack_<summary>` / `<summary>_pack`.

The kind is the first rule of `KIND_RULES` whose word starts the summary (`matmul` matches
`matmul`, `matmul_like_...` and `matmul_128x...`, not `matmulfoo`); an `unpack_` wrapper is
looked through. A summary no rule names, an unsummarized dispatch (`main$async_dispatch_3`)
and a name outside the pattern are `other`.

The ordinal `<N>` shifts whenever an IREE version outlines one dispatch more or fewer
before it, so builds are compared by the name with the ordinal blanked out
(`run_forward$async_dispatch_*_matmul_128x512x64_f32`): the same op on the same shapes from
the same function. Several dispatch functions can share a key (the same conv in three
resnet blocks); `group` sums them, so a build that fuses one of them differently shows as
that key's time and function count moving, not as a spurious rename.
"""

from __future__ import annotations

import re

OTHER = "other"
# (kind, the summary words that name it), in the order they are tried.
KIND_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "online_attention")),
    ("conv", ("conv", "depthwise_conv", "winograd", "im2col")),
    ("matmul", ("matmul", "batch_matmul", "matvec", "batch_matvec", "vecmat", "mmt4d",
                "batch_mmt4d", "contract", "horizontal_multi_contract", "dot")),
    ("reduction", ("reduction", "softmax", "reduce", "pooling", "arg_compare", "argmax",
                   "topk", "scan")),
    ("elementwise", ("elementwise", "add", "sub", "mul", "div", "exp", "max", "min")),
    ("data_movement", ("slow_memcpy", "transpose", "copy", "fill", "broadcast", "pack",
                       "unpack", "set_encoding", "unset_encoding", "gather", "scatter",
                       "map_scatter", "concatenate", "pad")),
)
DISPATCH_KINDS = (*(kind for kind, _ in KIND_RULES), OTHER)
_NAME = re.compile(r"^(?P<function>.+?)_dispatch_(?P<ordinal>\d+)(?:_(?P<summary>.+))?$")


def summary(name: str) -> str:
    """The op summary of a dispatch name ("" when it has none); the whole name when it
    does not follow IREE's pattern (a hand-written kernel)."""
    m = _NAME.match(name)
    return (m.group("summary") or "") if m else name


def _rule_kind(text: str) -> str | None:
    for kind, words in KIND_RULES:
        if any(text == w or text.startswith(w + "_") for w in words):
            return kind
    return None


def kind(name: str) -> str:
    """attention | conv | matmul | reduction | elementwise | data_movement | other."""
    text = summary(name)
    if text.startswith("unpack_"):
        inner = _rule_kind(text[len("unpack_"):])
        if inner is not None:
            return inner
    return _rule_kind(text) or OTHER


def key(name: str) -> str:
    """The name with its ordinal blanked out: what stays when IREE renumbers dispatches."""
    m = _NAME.match(name)
    if m is None:
        return name
    tail = f"_{m.group('summary')}" if m.group("summary") else ""
    return f"{m.group('function')}_dispatch_*{tail}"
