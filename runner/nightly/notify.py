"""The night's summary, posted as JSON to a webhook (Slack, Teams, Mattermost, any URL
that takes a POST): the morning's one message.

A Slack or Teams webhook carries its secret in the path itself
(`https://hooks.slack.com/services/T.../B.../<token>`), so the URL is never printed whole:
`shown_url()` keeps its scheme and host only. A post that fails (no network, a 4xx, past its
time limit) is reported on stderr and does not change the night's exit code: the night's
verdict is the scheduler's to act on, the message only a copy of it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from runner.base.errors import BadInput

POST_TIMEOUT_S = 20.0  # a webhook answers in well under a second; a dead one must not hang


def check_url(url: str) -> str:
    """An http(s) URL with a host; anything else is refused before the night runs."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or "\n" in url:
        raise BadInput(f"{shown_url(url)!r} is not an http(s) URL", where="--notify",
                       fix="pass the webhook's URL, e.g. https://hooks.slack.com/services/...")
    return url


def shown_url(url: str) -> str:
    """The URL fit for a log: scheme and host, the path and query (the secret) hidden."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    hidden = "/REDACTED" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


def message(summary: dict[str, Any]) -> dict[str, Any]:
    """The body: `text` (what Slack and Teams show) and the summary itself."""
    return {"text": summary["headline"], "nightly": summary}


def post(url: str, summary: dict[str, Any], timeout: float = POST_TIMEOUT_S) -> str | None:
    """Posts the summary; None when the webhook took it, else why not (never raises)."""
    body = json.dumps(message(summary), sort_keys=True).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status = answer.status
    except urllib.error.HTTPError as e:
        return f"{shown_url(url)} answered HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return f"{shown_url(url)} could not be reached: {reason}"
    return None if 200 <= status < 300 else f"{shown_url(url)} answered HTTP {status}"
