"""Times, durations and counts written one way on every page: dates in UTC or in the reader's zone,
durations a person reads at a glance ("3.2 s", "4 min"), counts with separators. Never a raw epoch."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}")


@dataclass(frozen=True)
class Clock:
    """How a page writes times: in UTC, or in the reader's own zone (named by the browser)."""

    zone: tzinfo = timezone.utc

    @classmethod
    def named(cls, name: str | None) -> Clock:
        """The zone a browser said (an IANA name from a cookie: hostile); UTC for anything else."""
        if not name or name == "UTC" or len(name) > 64 or not _ZONE_NAME.fullmatch(name):
            return cls()
        try:
            return cls(ZoneInfo(name))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            return cls()

    @property
    def is_utc(self) -> bool:
        return self.zone is timezone.utc

    @property
    def label(self) -> str:
        return "UTC" if self.is_utc else str(self.zone)

    def when(self, moment: datetime | None, seconds: bool = True, fraction: bool = False) -> str:
        """'2026-11-21 22:14:32 UTC'; a naive time is taken as UTC; '' for none."""
        if moment is None or (isinstance(moment, float) and math.isnan(moment)):
            return ""
        local = as_utc(moment).astimezone(self.zone)
        shape = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
        text = local.strftime(shape) + (f".{local.microsecond // 1000:03d}" if fraction else "")
        return f"{text} {'UTC' if self.is_utc else local.strftime('%Z')}"

    def clock_time(self, moment: datetime) -> str:
        """'22:14:32' in this zone: for lines within one day, under a heading that names the zone."""
        return as_utc(moment).astimezone(self.zone).strftime("%H:%M:%S")


def as_utc(moment: datetime) -> datetime:
    """A time with its zone; a naive one (SQLite's, Spark's in its UTC session) taken as UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def duration(seconds: float | timedelta | None) -> str:
    """'850 ms', '3.2 s', '45 s', '4 min', '1 h 5 min', '3 d 4 h'; '' for none."""
    if seconds is None:
        return ""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if not math.isfinite(seconds):
        return ""
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 1:
        return f"{sign}{s * 1000:.0f} ms"
    if s < 10:
        return f"{sign}{s:.1f} s"
    if s < 90:
        return f"{sign}{s:.0f} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{sign}{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{sign}{days} d" + (f" {hours} h" if hours else "")


def count(n: int | float | None) -> str:
    """'12,345'; '' for none; a fraction keeps one decimal."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return ""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.1f}"
    return f"{int(n):,}"


def counted(n: int, what: str, plural: str | None = None) -> str:
    """'1 consumer', '2 consumers', '1,000 messages'."""
    return f"{count(n)} {what if n == 1 else plural or what + 's'}"


def size(n_bytes: int | None) -> str:
    """'512 B', '1.5 KiB', '20 MiB'."""
    if n_bytes is None:
        return ""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    return ""


def yes_no(value: bool | None) -> str:
    """A boolean as every page shows one (the tables' own spelling): true, false; '' for none."""
    return "" if value is None else "true" if value else "false"


# What acts anywhere in a line; wire text never starts one, so "-", "#" and "1." stay as they are.
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def md(text: object) -> str:
    """Text from the wire, inert in Markdown: no HTML (a tag needs "<", escaped with "&"), no emphasis,
    links or table breaks; ">" stays, so an arrow reads as one in the file."""
    text = str(text).replace("&", "&amp;").replace("<", "&lt;")
    return _MARKDOWN.sub(r"\\\1", text).replace("\n", " ").replace("\r", " ")


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula gets a leading apostrophe (what is exported
    comes from the wire); anything else is left as it is."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_START) else value
