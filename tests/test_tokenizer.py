from pathlib import Path

import numpy as np
import pytest

from runner.base.errors import RunnerError
from runner.base.paths import ASSETS_DIR
from runner.config.mlperf_data import load_captions
from runner.model.tokenizer import ClipTokenizer, TokenizerFiles

TOKENIZER_DIR = ASSETS_DIR / "tiny" / "tokenizer"
EXTRA = [
    "Hello,   WORLD!! café naïve  ", "a photo of 3 dogs's toys", "x" * 300, "wow!? ok !",
    "!a!b", "<|endoftext|> hi", "tab\tnew\nline", "Ünïcödé ÄÖ 東京 😀", "a<|startoftext|>b", "",
]


@pytest.mark.parametrize("pad", ["<|endoftext|>", "!"])
def test_matches_transformers_clip_tokenizer_on_every_caption(pad):
    transformers = pytest.importorskip("transformers")
    texts = list(load_captions().texts) + EXTRA
    ours = ClipTokenizer(TokenizerFiles.in_dir(TOKENIZER_DIR), 64, pad).encode(texts)
    ref = transformers.CLIPTokenizer(
        vocab=str(TOKENIZER_DIR / "vocab.json"), merges=str(TOKENIZER_DIR / "merges.txt"),
        pad_token=pad,
    )(texts, padding="max_length", max_length=64, truncation=True, return_tensors="np")
    mismatched = [texts[i] for i in np.flatnonzero((ours != ref.input_ids).any(axis=1))]
    assert mismatched == []


def test_rows_are_bos_tokens_eos_then_padding():
    tok = ClipTokenizer(TokenizerFiles.in_dir(TOKENIZER_DIR), 64, "!")
    row = tok.encode(["a cat"])[0]
    n = len(tok.token_ids("a cat"))
    assert row[0] == tok.bos and row[n + 1] == tok.eos
    assert (row[n + 2 :] == tok.pad).all() and tok.pad == 0
    long_row = tok.encode(["word " * 200])[0]
    assert long_row[-1] == tok.eos and long_row.shape == (64,)


def test_missing_tokenizer_dir_names_the_file_and_fix(tmp_path: Path):
    with pytest.raises(RunnerError) as err:
        TokenizerFiles.in_dir(tmp_path)
    assert "vocab.json" in str(err.value) and "merges.txt" in str(err.value.fix)
