"""The README's demo runs as written: the real bot.py against the fakes, a /video and an /image shown."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.harness import REPO


def readme_demo_command() -> list[str]:
    """The demo command of the README's "See it work first" block (after the install, ``&&``-joined)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## See it work first", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    command = block.strip().split(" && ")[-1]
    words = shlex.split(command)
    assert words == ["python", "demo.py"], command
    # `python` is the activated virtualenv's interpreter: this one.
    return [sys.executable, *words[1:]]


def test_the_readmes_demo_shows_a_member_a_video_and_an_image_within_a_minute() -> None:
    started = time.monotonic()
    proc = subprocess.run(
        readme_demo_command(), cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL
    )
    took = time.monotonic() - started
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert took < 60, f"the demo took {took:.0f} s"
    # The member's view: the job's message edit by edit, from the queue to the file, with its buttons.
    video, image = out.split("\n/image ", 1)
    assert "/video prompt:" in video
    # (Queued, the create and the upload may pass between two edits: edits are EDIT_INTERVAL apart.)
    for seen in ("Generating", "Done", "buttons: Cancel", "Again | Remix | Delete"):
        assert seen in video, f"{seen!r} missing from the /video run:\n{video}"
    assert video.count("-- edit ") >= 3, video
    assert "Done" in image and "buttons: Again | Remix | Delete" in image
    assert "Requested by: @newcomer" in video  # mentions shown as Discord shows them
    delivered = re.findall(r"delivered: (framecast-\d+\.(\w+)), ([\d,]+) bytes, saved to (\S+)", out)
    assert [kind for _, kind, _, _ in delivered] == ["mp4", "png"], out
    for name, _, size, where in delivered:
        path = Path(where)
        assert path.name == name and path.stat().st_size == int(size.replace(",", "")) > 0
    assert re.search(r"the bot stopped \(exit code 0\)", out)
    assert "Traceback" not in out + proc.stderr
