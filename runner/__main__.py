"""The `runner` command (and `python -m runner`): the signal handlers first, then the CLI.

Importing the CLI takes a while (numpy, the IREE bindings' loaders, every command's
module); a Ctrl-C in that time would otherwise end in a KeyboardInterrupt traceback."""

from runner.base.signals import exit_at_once


def main() -> int:
    exit_at_once()  # until the CLI sets its own handlers
    from runner.cli.main import main as cli_main

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
