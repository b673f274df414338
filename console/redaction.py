"""No secret reaches a log at any verbosity: a filter on every log handler of a process replaces each
secret the settings hold (passwords, tokens, the event key, a Spark Connect URL) with ***, whichever
library wrote the line (py4j's debug log echoes every option the job gives Spark)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from console.config import EVENT_KEY_ENV, EVENT_KEY_FILE, SECTIONS, Settings, specs

HIDDEN = "***"
QUIET = ("py4j",)  # its DEBUG lines are the JVM protocol itself, options and all
API_TOKEN = re.compile(r"bct_[A-Za-z0-9_-]{16,}")  # console.api.tokens' shape: PREFIX and 32 random bytes
QUERY_SECRET = re.compile(r"([?&;](?:access_token|id_token|refresh_token|token|api_key|apikey|key|password|passwd|"
                          r"secret|client_secret|code|auth|authorization)=)[^&;\s]+", re.IGNORECASE)


def secret_values(settings: Settings) -> list[str]:
    """Every secret the settings hold, and the event key where one exists already (none is made here)."""
    found: list[str] = []
    for section, cls in SECTIONS.items():
        values = getattr(settings, section)
        for name, spec in specs(cls):
            value = getattr(values, name)
            if spec.secret and value:
                found.append(value.decode() if isinstance(value, bytes) else str(value))
    key_files = [settings.event_log.key_file, Path(settings.data.data_dir) / EVENT_KEY_FILE]
    for path in filter(None, key_files):
        try:
            found.append(Path(str(path)).read_text().strip())
        except OSError:
            pass
    if os.environ.get(EVENT_KEY_ENV):
        found.append(os.environ[EVENT_KEY_ENV].strip())
    return found


class Redactor(logging.Filter):
    def __init__(self, secrets: list[str]):
        super().__init__()
        # Longest first (a password that holds another); a value of under 4 characters would hide words.
        self.secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def hide(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, HIDDEN)
        if "bct_" in text or "=" in text:  # a token sent by mistake in a URL: the web's access log writes it
            text = QUERY_SECRET.sub(rf"\1{HIDDEN}", API_TOKEN.sub(f"bct_{HIDDEN}", text))
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = self.hide(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self.hide(logging.Formatter().formatException(record.exc_info))
        return True


def redact_logs(settings: Settings) -> Redactor:
    """Put the redactor on every handler of the root logger (every logger's lines pass through one)."""
    redactor = Redactor(secret_values(settings))
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.INFO)
    return redactor
