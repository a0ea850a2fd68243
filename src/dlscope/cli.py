"""The `dlscope` command line. DLProf's option names where they exist; errors are one line.

Exit codes: 0 done; 1 `dlscope check` found a regression; 2 bad input or request (one line naming it);
3 an internal error (a bug in dlscope: never mistaken for a regression by CI); 130 interrupted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from .errors import DlscopeError
from .version import __version__

#: exit code of a bug in dlscope (a regression found by `check` is 1, bad input 2)
INTERNAL_ERROR = 3

RULES_OPTION = click.option("--rules-config", type=click.Path(path_type=Path), default=None, metavar="FILE",
                            help="JSON overriding expert-system thresholds (shape of dlscope/data/rules.json).")

CRITICAL_PATH_OPTION = click.option(
    "--no-critical-path", is_flag=True,
    help="Skip replaying the dependency graph (each aggregation's critical path and the findings' simulated "
         "savings stay empty): about a third of the import time of a large trace.")

ITER_OPTIONS = [
    click.option("--iter-start", type=int, default=None, help="First iteration of the aggregation (inclusive)."),
    click.option("--iter-stop", type=int, default=None, help="Last iteration of the aggregation (inclusive)."),
    click.option("--key-node", default=None, help="Op or range name that marks the start of each iteration."),
]


def iter_options(fn):
    for option in reversed(ITER_OPTIONS):
        fn = option(fn)
    return fn


def _split(values: str) -> list[str]:
    return [v.strip() for v in values.split(",") if v.strip()]


class _Commands(click.Group):
    """The command group. Commands that live with their stage (capture, compare, present, roofline, viewer, whatif)
    are loaded when named or listed (``--help``), not with every command: an import starts ~10 ms sooner."""

    #: command -> (its module, relative to this package; its name there)
    ELSEWHERE = {"profile": (".capture.cli_profile", "profile_command"),
                 "diff": (".compare.cli_compare", "diff_command"),
                 "check": (".compare.cli_compare", "check_command"),
                 "view": (".viewer.cli_view", "view_command"),
                 "whatif": (".whatif.cli_whatif", "whatif_command"),
                 "export": (".present.cli_export", "export_command"),
                 "characterize": (".roofline.cli_characterize", "characterize_command")}

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return sorted({*self.commands, *self.ELSEWHERE})

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.ELSEWHERE:
            from importlib import import_module

            module, name = self.ELSEWHERE[cmd_name]
            self.add_command(getattr(import_module(module, __package__), name), cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dlscope")
def cli() -> None:
    """dlscope: where the time of a deep-learning job goes, with numbers you can trust."""


@cli.command("import")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output-path", "output", type=click.Path(path_type=Path), required=True,
              help="Profile database to write (SQLite).")
@click.option("--profile-name", default=None, help="A label for this profile.")
@iter_options
@click.option("--force", is_flag=True, help="Overwrite an existing output database.")
@RULES_OPTION
@click.option("--workers", type=int, default=None,
              help="Worker processes for a multi-file job (default: all cores for jobs of 64 MiB of JSON or "
                   "more; from 32 MiB, the later half of the files read by one forked process).")
@click.option("--scheduler", default=None,
              help="Dask scheduler address (tcp://HOST:PORT); files must be readable there.")
@click.option("--max-memory", default=None,
              help="Memory budget, e.g. 8GB: traces too large to read whole are streamed; an import whose "
                   "analysis would not fit is refused before anything is written.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Samples per batch (one batch a step), for throughput in samples per second.")
@click.option("--samples-per-step", type=click.IntRange(min=1), default=None,
              help="Samples per step when a step takes several batches or counts tokens (default: --batch-size).")
@click.option("--sample-unit", default=None, help="What a sample is: images, tokens, sequences … [default: samples].")
@CRITICAL_PATH_OPTION
@click.option("--max-python-frames", type=click.IntRange(min=0), default=None,
              help="Most Python frames (python_function events) kept per trace; the shortest are dropped and "
                   "counted [default: 2,000,000].")
@click.option("--quiet", "-q", is_flag=True, help="Print no summary.")
def import_command(traces, output, profile_name, iter_start, iter_stop, key_node, force, rules_config, workers,
                   scheduler, max_memory, batch_size, samples_per_step, sample_unit, no_critical_path,
                   max_python_frames, quiet) -> None:
    """Import PyTorch/Kineto traces, Nsight Systems SQLite exports or nsys NVTX CSVs (files or folders;
    one file per rank) and Nsight Compute CSVs into a profile database."""
    from .pipeline.head_start import started

    reading = None
    if max_python_frames is not None:
        from .importers.kineto import Reading

        reading = Reading(max_python_frames=max_python_frames)
    # a mid-sized job's later files are read by a child forked now, while this process loads the pipeline
    with started(traces, workers=workers, scheduler=scheduler, max_memory=max_memory, reading=reading):
        from .pipeline import build_database

        build_database(traces, output, profile_name=profile_name, iter_start=iter_start, iter_stop=iter_stop,
                       key_node=key_node, force=force, progress=not quiet, rules_config=rules_config,
                       workers=workers, scheduler=scheduler, max_memory=max_memory,
                       critical_path=not no_critical_path, reading=reading,
                       extra_meta={"throughput": {"batch_size": batch_size, "samples_per_step": samples_per_step,
                                                  "unit": sample_unit}})
    if not quiet:
        from .present.summary import render_summary, summary_dict  # not loaded at all by an import with -q

        click.echo(render_summary(summary_dict(output)), nl=False)
    click.echo(f"wrote {output}", err=True)
    global _outputs_closed
    _outputs_closed = True  # the database is committed, closed and renamed into place: nothing is left open


@cli.command("summary")
@click.argument("database", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--agg-id", type=int, default=None, help="Aggregation to show (default: the newest).")
@click.option("--rank", type=int, default=None, help="Rank whose figures to show (default: the lowest).")
def summary_command(database, as_json, agg_id, rank) -> None:
    """Show the key metrics of a profile database (of a job: the job, then one rank's figures)."""
    from .present.summary import render_summary, summary_dict

    summary = summary_dict(database, agg_id, rank)
    click.echo(json.dumps(summary, indent=1) if as_json else render_summary(summary), nl=not not as_json)


@cli.command("aggregate")
@click.argument("database", type=click.Path(path_type=Path))
@iter_options
@click.option("--rank", type=int, default=None, help="Only this rank (default: every rank).")
@RULES_OPTION
@CRITICAL_PATH_OPTION
def aggregate_command(database, iter_start, iter_stop, key_node, rank, rules_config, no_critical_path) -> None:
    """Add an aggregation (iteration range, key node) to a database without re-importing."""
    from .pipeline import aggregate

    ids = aggregate(database, iter_start, iter_stop, key_node, rank, rules_config,
                    critical_path=not no_critical_path)
    click.echo(f"added aggregation {', '.join(map(str, ids))} to {database}", err=True)


@cli.command("report")
@click.argument("database", type=click.Path(path_type=Path))
@click.option("--reports", default="summary,detail,iteration,kernel,tensor_core,op_type,group_node,expert_systems",
              help="Comma-separated reports.")
@click.option("--formats", default="csv", help="Comma-separated formats: csv, json, md, html, png, svg.")
@click.option("-o", "--output-path", "out_dir", type=click.Path(path_type=Path), default=Path("."),
              help="Folder for the report files.")
@click.option("--agg-id", type=int, default=None, help="Aggregation to report (default: the newest).")
@click.option("--rank", type=int, default=None, help="Rank whose figures to report (default: the lowest).")
@click.option("--gpu-spec", type=click.Path(path_type=Path), default=None,
              help="JSON with one GPU's peaks for the roofline (shape of an entry of dlscope/data/gpu_specs.json).")
def report_command(database, reports, formats, out_dir, agg_id, rank, gpu_spec) -> None:
    """Write DLProf's reports (summary, detail, iteration, kernel, tensor_core, op_type, group_node,
    expert_systems),
    roofline (csv, json, md, png, svg), and one self-contained HTML report (--formats html)."""
    from .present.reports import write_reports

    if rank is not None:
        from .distributed.job import rank_agg_id
        from .store import reader

        conn = reader.connect(database)
        try:
            agg_id = rank_agg_id(conn, rank, agg_id)
        finally:
            conn.close()
    fmts = _split(formats)
    if "html" in fmts:
        from .present.html_report import write_html_report

        fmts.remove("html")
        click.echo(str(write_html_report(database, out_dir, agg_id)))
    if fmts:
        for path in write_reports(database, out_dir, _split(reports), fmts, agg_id, gpu_spec=gpu_spec):
            click.echo(str(path))


#: set by a command when it returns with every file it wrote closed (``import``): the console command may then end
#: the process without the interpreter's teardown (:func:`run`)
_outputs_closed = False


def run() -> None:
    """The console command: :func:`main`, then the process's end.

    After an import, the interpreter's teardown (freeing every object of pandas, numpy, pyarrow and the analysis
    one by one: 0.1-0.3 s a run, measured in bench/README.md) does nothing the OS does not do at once, so, when no
    other thread runs, the exit handlers run and stdout and stderr are flushed as at a normal exit, then the
    process ends (``os._exit``). Anything else (another command, a thread still running, a failed flush: a
    closed pipe) exits the normal way."""
    code = main()
    if _outputs_closed and code == 0 and _only_thread():
        import atexit

        atexit._run_exitfuncs()  # e.g. the copies of piped inputs are removed (importers.streams.release)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # the normal exit reports it (exit code 120)
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def _only_thread() -> bool:
    import threading

    return threading.active_count() == 1 and threading.current_thread() is threading.main_thread()


def _terminate(signum, frame) -> None:
    """SIGTERM unwinds like Ctrl-C, so temporary files are removed and helpers stopped on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2."""
    import signal
    import threading

    global _outputs_closed
    _outputs_closed = False
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code = cli.main(args=argv, prog_name="dlscope", standalone_mode=False)
    except DlscopeError as e:
        click.echo(f"dlscope: error: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("dlscope: interrupted", err=True)
        return 130
    except click.ClickException as e:
        click.echo(f"dlscope: error: {e.format_message()}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("dlscope: interrupted", err=True)
        return 130
    except MemoryError:
        click.echo("dlscope: error: out of memory; give the import a budget with --max-memory (e.g. 4GB) so "
                   "large traces are streamed", err=True)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug must still not dump a traceback on the user
        if os.environ.get("DLSCOPE_DEBUG"):
            raise
        click.echo(f"dlscope: internal error: {type(e).__name__}: {e} (set DLSCOPE_DEBUG=1 for details)", err=True)
        return INTERNAL_ERROR
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code if isinstance(code, int) else 0


