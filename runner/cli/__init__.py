"""The `runner` command: `main` (runner/cli/main.py) parses the command line and runs the
command; each package's cli.py registers its commands with the grammar every command
shares (`grammar`) and a handler that takes the command's `context.CommandContext`;
`output` applies every command's --out/--resume rule, and `doc` renders the parser as the
CLI reference.

Imports nothing itself: a package's cli.py imports `runner.cli.grammar`, which runs this
file first, and `main` imports those cli.py files, so an import here would be a cycle.
"""

__all__ = ["context", "doc", "grammar", "main", "output", "validate"]
