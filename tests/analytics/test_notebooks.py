"""The two notebooks, executed with nbclient against a real server, collector and analytics run."""

import asyncio
import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from console.analytics.job import JobSettings, run_once
from console.analytics.source import SourceOptions
from console.config import event_key

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


async def execute(name: str, env: dict[str, str], folder: Path = NOTEBOOKS) -> str:
    """Runs the notebook in a fresh kernel, in `folder` (Jupyter's working directory: the notebook's
    own); returns every text output, in order."""
    nb = nbformat.read(folder / name, as_version=4)
    saved = dict(os.environ)
    os.environ.update(env)  # the kernel inherits the environment it is started with
    try:
        await NotebookClient(nb, timeout=120, kernel_name="python3",
                             resources={"metadata": {"path": str(folder)}}).async_execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + "".join(str(v) for k, v in out.get("data", {}).items()
                                                        if k == "text/plain"))
    return "\n".join(texts), nb


def rich_outputs(nb) -> int:
    """Cells that rendered a Panel/Bokeh component (not only text)."""
    return sum(1 for cell in nb.cells for out in cell.get("outputs", [])
               if any(k.startswith("application/vnd.holoviews") or k == "text/html" for k in out.get("data", {})))


async def test_both_notebooks_run_against_a_real_server_and_show_the_lost_batches(spark, server, client, produce, tmp_path):
    js = client.jetstream()
    for i in range(3):
        await js.publish("joba.x", f"stored {i}".encode())
    key = event_key(data_dir=tmp_path)  # the one the notebooks find in their data directory
    await produce(["nb-1", "nb-2"], key=key)
    await asyncio.to_thread(run_once, lambda: spark, JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url,
                                                                           "event_secret": key.decode()})))
    env = {"BATCH_CONSOLE_SERVER": server.url, "BATCH_CONSOLE_DATA_DIR": str(tmp_path), "BATCH_ID": "nb-1",
           "REPLAY_STREAM": "JOBA"}

    text, nb = await execute("quickstart.ipynb", env)
    assert "2 lost batches in the last hour" in text and "nb-1" in text and "nb-2" in text
    assert "JOBA" in text and "atomic=True" in text
    assert "replay JOBA: 3 messages fetched" in text  # the Replay page driven by its params
    assert "a year ago: 0 abandoned batches" in text  # History follows the dates set on it
    assert "since yesterday: 2 abandoned batches" in text
    assert "no loss objectives (give the console --objectives FILE)" in text  # none given here
    assert "0 canary batch(es) in the last hour" in text
    assert rich_outputs(nb) >= 4  # the live table, the streams editor, Replay, History

    text, nb = await execute("incident_investigation.ipynb", env)
    assert "investigating nb-1" in text
    assert "▶ atomic abandoned batch nb-1: reason incomplete" in text
    assert "atomic abandoned batch nb-2" in text  # the other abandonment on the stream, in the window
    assert "# Incident: batch nb-1" in text
    assert "3 messages from" in text and "stored 0" in text  # the peek into the window
    assert "JOBA" in text and "incomplete" in text  # SQLite history by stream
    assert "abandonments by reason (Delta): {'incomplete': 2}" in text
    assert rich_outputs(nb) >= 4


async def test_notebooks_in_their_own_folder_find_the_consoles_data_and_a_wrong_key_is_an_error(
        spark, server, client, produce, tmp_path):
    """A project laid out as the repository is (notebooks/ beside data/), Jupyter started in notebooks/
    with no data directory set: the notebook finds ../data and says so; with another key in it, the
    notebook stops with the key error (naming the key file), not with empty results."""
    import shutil

    from nbclient.exceptions import CellExecutionError

    project = tmp_path / "project"
    shutil.copytree(NOTEBOOKS, project / "notebooks")
    data = project / "data"
    key = event_key(data_dir=data)
    await produce(["own-folder-1"], key=key)  # with the collector's heartbeat: what tells a wrong key
    env = {"BATCH_CONSOLE_SERVER": server.url, "REPLAY_STREAM": "JOBA"}
    text, _ = await execute("quickstart.ipynb", env, project / "notebooks")
    assert f"data directory {data.resolve()}" in text
    assert "own-folder-1" in text and "lost batches in the last hour" in text
    assert not (project / "notebooks" / "data").exists()  # no key made beside the notebook

    (data / "event.key").write_text("a-different-key-0123456789abcdef\n")
    try:
        text, _ = await execute("quickstart.ipynb", env, project / "notebooks")
    except CellExecutionError as e:
        refused = str(e)
    else:
        raise AssertionError(f"a wrong key went unnoticed:\n{text}")
    assert "KeyMismatchError" in refused and "event key wrong" in refused
    assert str((data / "event.key").resolve()) in refused
