"""The console command run in a fresh interpreter with spies set up first (the head start happens only before
pandas loads, so it cannot be spied on in the test's own process). The spies write JSON lines to a log with
``logged``; at the end the script records whether any child of the command's process was left (``os.wait``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_PROLOGUE = """
import json, os, sys
log = sys.argv.pop(1)

def logged(what):
    with open(log, "a") as f:
        f.write(json.dumps(what) + "\\n")
"""

_MAIN = """
from dlscope.cli import main
code = main(sys.argv[1:])
try:
    os.wait()
    left = True
except ChildProcessError:
    left = False
logged({"children_left": left})
sys.exit(code)
"""


def run_spied(spies: str, log: Path, *args) -> subprocess.CompletedProcess:
    """``dlscope ARGS`` after ``spies`` (Python text that may call ``logged``) ran in the same fresh interpreter."""
    script = _PROLOGUE + spies + _MAIN
    return subprocess.run([sys.executable, "-c", script, str(log), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def spied_log(path: Path) -> list[dict]:
    """What the spies and the script logged, in order (none: the command never reached them)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
