"""Controls a screen reader (and a test's get_by_role) finds by name. Bokeh's lone Checkbox puts no
label on its input; a one-option CheckBoxGroup wraps the input in its label."""

from __future__ import annotations

import html
import io
from typing import Any, Awaitable, Callable

import panel as pn
import param

from console.actions import unaudited
from console.commands import Command, as_file
from console.errors import ConsoleError, Refusal


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


def refusals() -> param.Callable[Any]:
    """A page's `may`: (command class, stream=None) -> why its user may not take it, or None (their roles)."""
    return param.Callable(default=lambda command, stream=None: None, allow_refs=False,
                          doc="(command class, stream) -> why this page's user may not take it, or None (their roles)")


async def _unaudited_export(command: Command[Any]) -> Any:
    return await unaudited(read_only=False).run(command)  # a view built by hand: exports change nothing


def exports(what: str) -> param.Callable[Any]:
    """A page's `export`: async (an export command of console.commands) -> the file's content, its attempt
    stored before the file is made and its outcome after (console.actions.Actions.run)."""
    return param.Callable(default=_unaudited_export, allow_refs=False,
                          doc=f"async (export command) -> {what} as a file's content, recorded before and after")


async def download(export: Callable[[Command[Any]], Awaitable[Any]], command: Command[Any]) -> io.BytesIO:
    """What a download button hands the browser: the export's file, or one line saying why it is refused."""
    try:
        return as_file(await export(command))
    except ConsoleError as e:  # read-only, the role, the session's end, no trail: the file says which
        return as_file(f"refused: {e}\n")


def permitted(controls: list[Any], why: str | None) -> str:
    """Turns `controls` off when the user may not use them, and says why (Markdown, escaped): a page shows
    it beside them. The action layer refuses a click that a crafted client sends all the same."""
    for control in controls:
        control.disabled = why is not None
    return f"**Not for you:** {html.escape(why)}" if why else ""


def name_the_system(page: Any, system: str) -> None:
    """Of several NATS systems, every button of a page on one of them names it ("Apply · prod-eu"), and so
    do those the page makes later (its `system` param): no change is made on a system not seen."""
    for button in pn.Column(page).select(pn.widgets.Button):
        button.label = on_system(button.label, system)
    if isinstance(page, param.Parameterized) and "system" in page.param:
        setattr(page, "system", system)


def on_system(label: str, system: str) -> str:
    return f"{label} · {system}" if system else label


async def taken(run: Callable[[Command[Any]], Awaitable[Any]], command_of: Callable[[], Command[Any]],
                limit: int = 300) -> tuple[Command[Any] | None, Any, str]:
    """One action a page's form asks for: (the command, its result, "") when taken, else (None, None, why) in
    escaped words: the server's refusal with its code and text, read-only mode, the role, the session's end,
    the form's own problem (`command_of` raising ValueError)."""
    try:
        command = command_of()
        return command, await run(command), ""
    except Refusal as refused:
        return None, None, f"**The server refused:** {html.escape(str(refused))}"
    except (ConsoleError, ValueError) as e:
        return None, None, html.escape(str(e)[:limit])


def failed(e: Exception) -> str:
    """A click's unexpected failure, said beside its control (a click never ends in silence)."""
    return f"**Failed:** {html.escape(type(e).__name__)}: {html.escape(str(e)[:300])}"
