"""Learns a small CLIP-format BPE vocabulary, so the tiny model ships its own tokenizer.

The files have exactly the layout of CLIP's (`vocab.json`: 256 byte symbols, the same with
`</w>`, one entry per merge, then BOS and EOS; `merges.txt` with a version header), so the
same tokenizer code reads them and the real SDXL vocabulary.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

from runner.base.fileio import atomic_write_text
from runner.model.tokenizer import BOS, EOS, byte_to_unicode, pretokenize


def learn_merges(texts: list[str], num_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE: repeatedly merge the most frequent adjacent pair (ties: smallest pair)."""
    words = Counter(word for text in texts for word in pretokenize(text))
    corpus = [([*w[:-1], w[-1] + "</w>"], n) for w, n in sorted(words.items())]
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, n in corpus:
            for pair in pairwise(symbols):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        for symbols, _n in corpus:
            i = 0
            while i < len(symbols) - 1:
                if (symbols[i], symbols[i + 1]) == best:
                    symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                i += 1
    return merges


def write_tokenizer(directory: Path, merges: list[tuple[str, str]]) -> dict[str, int]:
    alphabet = list(byte_to_unicode().values())
    tokens = alphabet + [s + "</w>" for s in alphabet] + ["".join(m) for m in merges] + [BOS, EOS]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(tokens))}
    atomic_write_text(directory / "vocab.json", json.dumps(vocab, ensure_ascii=False) + "\n")
    lines = ["#version: 0.2", *(" ".join(m) for m in merges)]
    atomic_write_text(directory / "merges.txt", "\n".join(lines) + "\n")
    return vocab
