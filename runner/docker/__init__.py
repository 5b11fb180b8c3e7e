"""Docker images and containers for the runner: build IREE into an image three ways (pinned
wheels, a source commit, an existing build tree), and run one worker per container.

Everything goes through the docker SDK (`docker` 7.x) against a real engine; the CLI-equivalent
`docker build` / `docker run` argv is produced alongside, for `--dry-run` and `reproduce.sh`.
"""

__all__ = ["buildenv", "cli", "container", "engine", "image", "in_image"]
