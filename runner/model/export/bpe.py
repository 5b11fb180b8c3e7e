"""Learns a small CLIP-format BPE vocabulary, so the tiny model ships its own tokenizer.

The files have exactly the layout of CLIP's (`vocab.json`: 256 byte symbols, the same with
`</w>`, one entry per merge, then BOS and EOS; `merges.txt` with a version header), so the
same tokenizer code reads them and the real SDXL vocabulary.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

from runner.base.fileio import atomic_write_text
from runner.model.tokenizer import BOS, EOS, byte_to_unicode, pretokenize


def learn_merges(texts: list[str], num_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE: repeatedly merge the most frequent adjacent pair (ties: smallest pair).

    Pair counts are kept up to date as merges go (only the words holding the merged pair
    are counted again) and the best pair comes off a heap, so each merge costs what it
    changes rather than a pass over the corpus."""
    words = Counter(word for text in texts for word in pretokenize(text))
    corpus = [([*w[:-1], w[-1] + "</w>"], n) for w, n in sorted(words.items())]
    pairs: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for index, (symbols, n) in enumerate(corpus):
        for pair in pairwise(symbols):
            pairs[pair] += n
            where[pair].add(index)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        while heap and pairs.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)  # a count since changed: its current entry is further down
        if not heap:
            break
        best = heapq.heappop(heap)[1]
        merges.append(best)
        changed: set[tuple[str, str]] = set()
        for index in sorted(where.pop(best)):
            symbols, n = corpus[index]
            for pair in pairwise(symbols):
                pairs[pair] -= n
                changed.add(pair)
            i = 0
            while i < len(symbols) - 1:
                if (symbols[i], symbols[i + 1]) == best:
                    symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                i += 1
            for pair in pairwise(symbols):
                pairs[pair] += n
                where[pair].add(index)
                changed.add(pair)
        for pair in changed:
            if pairs[pair] > 0:
                heapq.heappush(heap, (-pairs[pair], pair))
            else:
                del pairs[pair]
                where.pop(pair, None)
    return merges


def write_tokenizer(directory: Path, merges: list[tuple[str, str]]) -> dict[str, int]:
    alphabet = list(byte_to_unicode().values())
    tokens = alphabet + [s + "</w>" for s in alphabet] + ["".join(m) for m in merges] + [BOS, EOS]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(tokens))}
    atomic_write_text(directory / "vocab.json", json.dumps(vocab, ensure_ascii=False) + "\n")
    lines = ["#version: 0.2", *(" ".join(m) for m in merges)]
    atomic_write_text(directory / "merges.txt", "\n".join(lines) + "\n")
    return vocab
