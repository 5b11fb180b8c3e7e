from runner.base.signals import exit_at_once

exit_at_once()  # until the CLI sets its own handlers: a signal while importing, no traceback

from runner.cli import main  # noqa: E402  (after the handlers above)

raise SystemExit(main())
