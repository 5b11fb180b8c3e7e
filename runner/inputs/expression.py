"""pytest-style `-m`/`-k` expressions, bounded before they are parsed.

The parser (runner/goldens/select.py) is recursive descent over `not` and parentheses, and
matching walks the tree it builds: an expression nested thousands deep, or thousands of
names long, would overflow the stack or take unbounded time. Real ones are a few names.
"""

from __future__ import annotations

from runner.base.errors import BadInput

MAX_CHARS = 4096
MAX_TOKENS = 256
MAX_NESTING = 32  # parentheses and chained `not`s


def check_expression(text: str, tokens: list[str], where: str) -> None:
    """Refuses an expression too long or too deep to be a real selection."""
    fix = 'write a few names joined by and/or/not, e.g. "hip and gfx942"'
    if len(text) > MAX_CHARS or len(tokens) > MAX_TOKENS:
        raise BadInput(f"the expression is {len(text)} characters, {len(tokens)} tokens "
                       f"(at most {MAX_CHARS} and {MAX_TOKENS})", where=where, fix=fix)
    depth = nots = 0
    for token in tokens:
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        nots = nots + 1 if token == "not" else 0
        if depth + nots > MAX_NESTING:
            raise BadInput(f"the expression nests more than {MAX_NESTING} levels "
                           "(parentheses and `not`s)", where=where, fix=fix)
