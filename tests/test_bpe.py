"""The tiny model's BPE learner against the definition it implements, computed here from
scratch: count every adjacent pair over the corpus, merge the most frequent (ties: the
smallest pair) left to right, repeat. The shipped merges.txt is the learner's output on the
captions (tests/test_export.py re-exports it byte for byte); these corpora add the cases a
frequency-ordered learner gets wrong: runs of one symbol, ties, a vocabulary exhausted."""

from collections import Counter
from itertools import pairwise

import pytest

from runner.config.mlperf_data import load_captions
from runner.model.export.bpe import learn_merges
from runner.model.tokenizer import pretokenize


def merges_by_definition(texts: list[str], num_merges: int) -> list[tuple[str, str]]:
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


@pytest.mark.parametrize(("texts", "num_merges"), [
    (["aaaaaaa aaaa aaa aa", "abab abab ba ba"], 30),  # runs of one symbol, overlaps
    (["ab cd ef gh", "gh ef cd ab"], 20),  # every pair tied: the smallest goes first
    (["hello world hello", "a cat on a mat"], 0),
    (["x"], 5),  # no pair at all
])
def test_learn_merges_is_the_definition(texts, num_merges):
    assert learn_merges(texts, num_merges) == merges_by_definition(texts, num_merges)


def test_learn_merges_is_the_definition_on_captions_until_pairs_run_out():
    texts = list(load_captions().texts)[:200]
    expected = merges_by_definition(texts, 2000)
    assert 300 < len(expected) < 2000  # the pairs ran out before the merges asked for
    assert learn_merges(texts, 2000) == expected
