"""``dlscope view DB [DB2] [-b ADDRESS] [-p PORT] [--open]``: serve the viewer, like ``dlprofviewer``."""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
import tempfile
import threading
import webbrowser
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import click

from dlscope.errors import DlscopeError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def _check_port(host: str, port: int) -> None:
    """Fail early with one line when the port is taken (uvicorn would log a traceback-like error)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DlscopeError(f"port {port} on {host} is already in use; pick another with -p PORT") from None
            raise DlscopeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def serve(db_paths: Sequence[str | Path], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          open_browser: bool = False, aggregate: Callable | None = None, log_level: str = "warning",
          gpu_spec: str | Path | None = None, allow_hosts: Sequence[str] = ()) -> None:
    """Check the databases, then serve the viewer until interrupted. Raises DlscopeError on bad input."""
    import uvicorn

    from dlscope.viewer.app import create_app
    from dlscope.viewer.vendor import vendor_ready

    if not vendor_ready():
        raise DlscopeError("the viewer's browser libraries are missing (static/vendor); reinstall dlscope or run "
                           "`python -m dlscope.viewer.vendor` in a source checkout")
    if gpu_spec is not None:
        from dlscope.roofline import load_spec_file

        load_spec_file(gpu_spec)  # a bad spec file fails now, with its one-line reason
    from dlscope.viewer.security import allowed_hosts

    app = create_app(db_paths, aggregate=aggregate, gpu_spec=gpu_spec, hosts=allowed_hosts(host, allow_hosts))
    _check_port(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'localhost' if host in ('127.0.0.1', 'localhost') else shown}:{port}/"
    click.echo(f"dlscope viewer: {url}  (Ctrl+C to stop)")
    for db in app.state.viewer.dbs:
        click.echo(f"  {db.profile_name}: {db.path}" + (f"\n  note: {db.notice}" if db.notice else ""))
    if open_browser:
        threading.Timer(0.8, webbrowser.open, args=(url,)).start()
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


@contextlib.contextmanager
def _cprofile_databases(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """The paths to serve: a cProfile output (``python -m cProfile -o run.prof``) is imported into a database in
    a temporary folder that is removed when the viewer stops (named for this run, so the next viewer removes it
    if this one was killed); databases are served as they are."""
    from dlscope.importers import MARSHAL_DICT, sniff
    from dlscope.processes import owned_name, remove_dead

    remove_dead(tempfile.gettempdir(), "dlscope-view.")  # folders of viewers that were killed
    with tempfile.TemporaryDirectory(prefix=owned_name("dlscope-view") + "-") as tmp:
        out: list[Path] = []
        for path in paths:
            try:
                with open(path, "rb") as f:
                    marshalled = f.read(1) == MARSHAL_DICT
            except OSError:
                marshalled = False  # the viewer names the problem
            if marshalled and sniff(path) == "cprofile":
                from dlscope.pipeline.build import build_cprofile_database

                out.append(build_cprofile_database([path], Path(tmp) / f"{len(out)}-{path.stem}.sqlite"))
            else:
                out.append(path)
        yield out


@click.command("view")
@click.argument("databases", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-b", "--bind", "host", default=DEFAULT_HOST, show_default=True, metavar="ADDRESS",
              help="Address to listen on; 0.0.0.0 serves the whole local network.")
@click.option("-p", "--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535),
              help="Port to listen on.")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in the default browser.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another host name the browser may use to reach the viewer (repeatable); loopback names, the "
                   "-b address and, for -b 0.0.0.0, this machine's names and addresses are allowed already.")
@click.option("--gpu-spec", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON with one GPU's peaks for the Roofline view when the GPU is unknown "
                   "(shape of an entry of dlscope/data/gpu_specs.json).")
def view_command(databases: tuple[Path, ...], host: str, port: int, open_browser: bool,
                 allow_hosts: tuple[str, ...], gpu_spec: Path | None) -> None:
    """Browse profile databases (DB [DB2]) in the web viewer: dashboard, ops, kernels, iterations, GPUs,
    roofline, Python call stacks; with two databases (BASE NEW) also the Compare view. A cProfile output
    (run.prof) is imported into a temporary database, removed when the viewer stops."""
    if len(databases) > 2:
        raise click.UsageError("give one database, or two to compare or switch between them")
    try:
        with _cprofile_databases(databases) as paths:
            serve(paths, host, port, open_browser, gpu_spec=gpu_spec, allow_hosts=allow_hosts)
    except DlscopeError as exc:  # also when the command runs outside dlscope's main (tests, embedding)
        click.echo(f"dlscope: error: {exc}", err=True)
        sys.exit(exc.exit_code)
