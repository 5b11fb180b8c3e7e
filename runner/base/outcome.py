"""The words a judgement ends in, as one type: an accuracy verdict's pass / fail / subset,
a bisect build's good / bad / skip, and a history change point's kind.

Each is a `str` (the enum mixes it in), so a value compares equal to the word, is written
to JSON as the word (files stay as they were) and reads back from an old file as plain
text that still compares equal; what the type adds is one place that lists the words, so a
typo in a comparison is a name error rather than a branch never taken.
"""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """A judgement's word; `str(outcome)` and f-strings give the word itself."""

    PASS = "pass"  # measured and inside what it is judged against
    FAIL = "fail"
    SUBSET = "subset"  # scored on fewer samples than the ranges hold for: not judged
    GOOD = "good"  # a bisect build that behaves as the good end does
    BAD = "bad"
    SKIP = "skip"  # `git bisect skip`: the build cannot be judged
    # a change point in the history (runner/history/judge.py)
    REGRESSION = "regression"  # worse across builds, and confirmed: both measured again
    UNCONFIRMED = "unconfirmed"  # worse across builds, not measured again yet
    MACHINE = "machine"  # the same build, or the machine's conditions changed: not IREE
    IMPROVEMENT = "improvement"
    CHANGE = "change"  # a metric with no worse direction moved

    def __str__(self) -> str:
        return self.value
