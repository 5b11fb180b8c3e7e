"""CLIP's byte-level BPE tokenizer in plain Python, so a worker needs no transformers.

SDXL uses two CLIP tokenizers over one vocabulary that differ only in the pad token
(ViT-L pads with `<|endoftext|>`, OpenCLIP bigG with `!`). IREE's SDXL artifacts take
64 tokens per prompt. The text normalisation follows transformers' CLIPTokenizerFast
(NFC, whitespace collapsed, lower case); tests check token-for-token equality with it.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import regex

from runner.base.errors import BadInput
from runner.inputs.jsonfile import read_json
from runner.inputs.limits import MiB, read_text

BOS = "<|startoftext|>"
EOS = "<|endoftext|>"
_SPLIT = regex.compile(
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE,
)
_SPACES = regex.compile(r"\s+")


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the BPE alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def normalize(text: str) -> str:
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip().lower()


def pretokenize(text: str) -> list[str]:
    """Normalised text -> words in the BPE alphabet (before merges)."""
    table = byte_to_unicode()
    return [
        "".join(table[b] for b in piece.encode("utf-8"))
        for piece in _SPLIT.findall(normalize(text))
    ]


@dataclass(frozen=True)
class TokenizerFiles:
    vocab: Path
    merges: Path

    @classmethod
    def in_dir(cls, directory: Path) -> TokenizerFiles:
        files = cls(directory / "vocab.json", directory / "merges.txt")
        for path in (files.vocab, files.merges):
            if not path.is_file():
                raise BadInput(
                    "CLIP tokenizer file missing",
                    where=str(path),
                    fix="point the model config's `tokenizer_dir` at a directory holding the "
                    "CLIP BPE `vocab.json` and `merges.txt` (for SDXL: the `tokenizer/` folder "
                    "of stabilityai/stable-diffusion-xl-base-1.0, copied locally)",
                )
        return files


class ClipTokenizer:
    """Encodes prompts to fixed-length id rows: BOS, tokens (truncated), EOS, padding."""

    def __init__(self, files: TokenizerFiles, max_length: int, pad_token: str = EOS):
        vocab = read_json(files.vocab, max_bytes=64 * MiB, what="tokenizer vocabulary")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
            raise BadInput("the vocabulary must map tokens to integer ids",
                           where=str(files.vocab),
                           fix="use the checkpoint's own tokenizer/vocab.json")
        self.vocab: dict[str, int] = vocab
        lines = read_text(files.merges, max_bytes=64 * MiB, what="merges file").splitlines()
        merges = [tuple(line.split()) for line in lines if line and not line.startswith("#")]
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        for token in (BOS, EOS, pad_token):
            if token not in self.vocab:
                raise BadInput(
                    f"token {token!r} is not in the vocabulary",
                    where=str(files.vocab),
                    fix="use a CLIP vocabulary, or set `pad_token` to a token it holds",
                )
        self.max_length = max_length
        specials = sorted({BOS, EOS, pad_token}, key=len, reverse=True)
        self._special = regex.compile("(" + "|".join(regex.escape(t) for t in specials) + ")")
        self.bos, self.eos, self.pad = self.vocab[BOS], self.vocab[EOS], self.vocab[pad_token]
        self._bpe = functools.lru_cache(maxsize=1 << 16)(self._bpe_uncached)

    def _bpe_uncached(self, word: str) -> tuple[str, ...]:
        parts = [*word[:-1], word[-1] + "</w>"]
        while len(parts) > 1:
            ranks = [self.ranks[p] for p in pairwise(parts) if p in self.ranks]
            if not ranks:
                break
            best = min(ranks)
            merged: list[str] = []
            i = 0
            while i < len(parts):
                if i + 1 < len(parts) and self.ranks.get((parts[i], parts[i + 1])) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return tuple(parts)

    def token_ids(self, text: str) -> list[int]:
        """The prompt's ids without the added BOS/EOS or padding.

        BOS, EOS and the pad token are special tokens to the reference tokenizer: the text is
        split on them first and each occurrence is one id. This matters for SDXL's second
        tokenizer, which pads with `!`: `wow!?` is `wow`, `!`, `?` there, not `wow`, `!?`.
        """
        ids: list[int] = []
        for piece in self._special.split(normalize(text)):
            if piece in self.vocab and self._special.fullmatch(piece):
                ids.append(self.vocab[piece])
                continue
            for word in pretokenize(piece):
                ids.extend(self.vocab[part] for part in self._bpe(word))
        return ids

    def encode(self, prompts: list[str]) -> np.ndarray:
        """(len(prompts), max_length) int64, as the SDXL `encode_prompts` inputs expect."""
        rows = np.full((len(prompts), self.max_length), self.pad, dtype=np.int64)
        for r, prompt in enumerate(prompts):
            ids = [self.bos, *self.token_ids(prompt)[: self.max_length - 2], self.eos]
            rows[r, : len(ids)] = ids
        return rows
