"""Controls a screen reader (and a test's get_by_role) finds by name. Bokeh's lone Checkbox puts no
label on its input; a one-option CheckBoxGroup wraps the input in its label."""

from __future__ import annotations

import html

import panel as pn
import param


def checkbox(owner: param.Parameterized, name: str, label: str | None = None) -> pn.widgets.CheckBoxGroup:
    """A named checkbox tied both ways to the boolean param `name` of `owner`."""
    label = label or name
    box = pn.widgets.CheckBoxGroup(options=[label], value=[label] if getattr(owner, name) else [])
    box.param.watch(lambda e: setattr(owner, name, label in e.new), "value")
    owner.param.watch(lambda e: setattr(box, "value", [label] if e.new else []), name)
    return box


def keep_choice(owner: param.Parameterized, name: str) -> None:
    """A choice given before the options are known (from a URL) stays an option, so that the select
    made from the param does not fall back to its first one."""
    value, objects = getattr(owner, name), owner.param[name].objects
    if value not in (objects.values() if isinstance(objects, dict) else objects):
        owner.param[name].objects = [*objects, value] if isinstance(objects, list) else {**objects, value: value}


def refusals() -> param.Callable:
    """A page's `may`: (action, stream=None) -> why its user may not take it, or None (their roles)."""
    return param.Callable(default=lambda action, stream=None: None, allow_refs=False,
                          doc="(action, stream) -> why this page's user may not take it, or None (their roles)")


async def _taken(what: str, stream: str | None = None) -> str | None:
    return None


def downloads(what: str) -> param.Callable:
    """A page's `exported`: async (what, stream=None) -> why a download of `what` is refused, or None once
    its attempt is in the audit trail (console.actions: written ahead)."""
    return param.Callable(default=_taken, allow_refs=False,
                          doc=f"async (what, stream) -> why a download of {what} is refused, or None (recorded first)")


def permitted(controls: list, why: str | None) -> str:
    """Turns `controls` off when the user may not use them, and says why (Markdown, escaped): a page shows
    it beside them. The action layer refuses a click that a crafted client sends all the same."""
    for control in controls:
        control.disabled = why is not None
    return f"**Not for you:** {html.escape(why)}" if why else ""
