import os
import signal


def _quiet(signum, frame):  # a signal while the CLI is still being imported: no traceback
    os._exit(128 + signum)


for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_signum) is not signal.SIG_IGN:
        signal.signal(_signum, _quiet)

from runner.cli import main  # noqa: E402  (after the handlers above)

raise SystemExit(main())
