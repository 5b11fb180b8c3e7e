"""Rules the test suite keeps about itself (docs/CONTRIBUTING.md, "Numbers across machines"):
no float of 12 or more significant digits is written into a test unless it is on the list
below with the reason it is not a number computed through BLAS/torch kernels on one machine
(such a number is compared with its reference computed in the same run instead)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

TESTS = Path(__file__).resolve().parent
DIGITS = 12  # a float printed by repr() to this many digits came out of some computation
ALLOWED = {
    "23.813210898858188": "AMD's published MI325X FID: an input to verdict arithmetic and "
                          "to the MLPerf line's formatting (test_accuracy.py)",
    "31.749402277171612": "AMD's published MI325X CLIP: as above",
}
_FLOAT = re.compile(r"(?<![\w.])\d*\.\d+(?:[eE][-+]?\d+)?|(?<![\w.])\d+[eE][-+]?\d+")


def significant_digits(text: str) -> int:
    mantissa = re.split(r"[eE]", text.replace("_", ""))[0].replace(".", "")
    return len(mantissa.strip("0"))


def long_floats(path: Path) -> list[tuple[int, str]]:
    """(line, literal) of every long float in the file's code: number literals, and floats
    spelled inside string literals (a frozen score can hide in an expected-output string).
    Comments are documentation and may quote numbers."""
    found = []
    source = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NUMBER:
            candidates = [tok.string]
        elif tok.type == tokenize.STRING:
            candidates = _FLOAT.findall(tok.string)
        else:
            continue
        found += [(tok.start[0], c) for c in candidates
                  if any(ch in c for ch in ".eE") and significant_digits(c) >= DIGITS]
    return found


def test_no_frozen_float_without_a_reason():
    mine = Path(__file__).resolve()  # its own examples below are what the guard must catch
    found = [f"{path.relative_to(TESTS)}:{line}: {text}"
             for path in sorted(TESTS.rglob("*.py")) if path != mine
             for line, text in long_floats(path) if text not in ALLOWED]
    assert not found, (
        "floats of 12+ digits in tests (frozen on one machine?): compare with a reference "
        "computed in the same run, or state and test a cross-machine tolerance, or, for a "
        "published value, add it to ALLOWED with its reason:\n" + "\n".join(found))


def test_the_guard_finds_frozen_floats_in_code_and_strings(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("LANDED_FID = 5.655695530984897  # 16 digits\n"
                    "TOL, ONE, SMALL = 1e-4, 1.0, 0.007127185142957\n"
                    "LINE = \"{'FID_SCORE': '23.813210898858188'}\"\n"
                    "RATIO = 1.5e-5  # 1.234567890123456 in a comment is documentation\n")
    assert long_floats(path) == [(1, "5.655695530984897"), (2, "0.007127185142957"),
                                 (3, "23.813210898858188")]
    assert significant_digits("0.0071271851429575") == 14
    assert significant_digits("1.000") == 1 and significant_digits("2.5e-10") == 2
