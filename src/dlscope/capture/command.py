"""Turn the user's command (``python train.py --lr 0.1``) into the same program run under the bootstrap.

Interpreter flags (``-u``, ``-O``, ``-W ...``, ``-X ...``) stay with the interpreter; ``-m MOD`` and
``-c CODE`` are kept; a ``.py`` file given alone runs with this interpreter. Anything else is not a
Python program the torch backend can enter.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ..errors import DlscopeError

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?(\.exe)?$")
_FLAGS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
_FLAGS = set("bBdEhiIOPqsSuvx") | {"OO", "bb", "vv"}


@dataclass
class PythonCommand:
    """A Python program: the interpreter with its flags, and what it runs (script, module or code)."""

    interpreter: str
    interpreter_flags: list[str] = field(default_factory=list)
    script: str | None = None
    module: str | None = None
    code: str | None = None
    args: list[str] = field(default_factory=list)

    def bootstrap_argv(self, options: list[str]) -> list[str]:
        """argv of the child: ``python FLAGS -m dlscope.capture.bootstrap OPTIONS [--module M] -- ...``."""
        argv = [self.interpreter, *self.interpreter_flags, "-m", "dlscope.capture.bootstrap", *options]
        if self.module:
            return [*argv, "--module", self.module, "--", *self.args]
        if self.code is not None:
            return [*argv, "--code", self.code, "--", *self.args]
        assert self.script is not None, "a command runs a script, a module or code"
        return [*argv, "--", self.script, *self.args]

    @property
    def label(self) -> str:
        return self.script or (f"-m {self.module}" if self.module else "-c")


def is_python(executable: str) -> bool:
    return bool(_PYTHON_NAME.match(os.path.basename(executable))) or _same_file(executable, sys.executable)


def _same_file(a: str, b: str) -> bool:
    path = shutil.which(a) or a
    try:
        return os.path.samefile(path, b)
    except OSError:
        return False


def parse_python_command(command: list[str]) -> PythonCommand | None:
    """The Python program in ``command``, or None when the command is not a Python program."""
    if not command:
        raise DlscopeError("no command to profile: put it after `--`, e.g. dlscope profile -- python train.py")
    head = command[0]
    if head.endswith(".py"):
        return PythonCommand(sys.executable, script=head, args=command[1:])
    if not is_python(head):
        return None
    interpreter = sys.executable if _same_file(head, sys.executable) else (shutil.which(head) or head)
    cmd = PythonCommand(interpreter)
    i = 1
    while i < len(command):
        arg = command[i]
        if arg in _FLAGS_WITH_VALUE and i + 1 < len(command):
            cmd.interpreter_flags += [arg, command[i + 1]]
            i += 2
        elif arg[:2] in ("-W", "-X") and len(arg) > 2:
            cmd.interpreter_flags.append(arg)
            i += 1
        elif arg == "-m" and i + 1 < len(command):
            cmd.module, cmd.args = command[i + 1], command[i + 2:]
            return cmd
        elif arg.startswith("-m") and len(arg) > 2:
            cmd.module, cmd.args = arg[2:], command[i + 1:]
            return cmd
        elif arg == "-c" and i + 1 < len(command):
            cmd.code, cmd.args = command[i + 1], command[i + 2:]
            return cmd
        elif arg.startswith("-") and arg != "-" and set(arg[1:]) <= _FLAGS:
            cmd.interpreter_flags.append(arg)
            i += 1
        elif arg.startswith("-"):
            raise DlscopeError(f"cannot profile `{' '.join(command[:i + 1])}`: unsupported interpreter option {arg}")
        else:
            cmd.script, cmd.args = arg, command[i + 1:]
            if not os.path.isfile(arg):
                raise DlscopeError(f"{arg}: no such script (command: {' '.join(command)})")
            return cmd
    raise DlscopeError("cannot profile an interactive Python session: give a script, -m MODULE or -c CODE")


def check_interpreter_has_dlscope(cmd: PythonCommand) -> None:
    """Another interpreter than this one must be able to import dlscope to run the bootstrap."""
    if _same_file(cmd.interpreter, sys.executable):
        return
    probe = subprocess.run([cmd.interpreter, "-c", "import dlscope.capture.bootstrap"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise DlscopeError(f"{cmd.interpreter} cannot import dlscope: install dlscope into that environment, "
                           f"or run the command with {sys.executable}")
