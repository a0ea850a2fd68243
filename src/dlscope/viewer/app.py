"""The viewer's HTTP application (Starlette): HTML views, their JSON twins, table API, exports, re-aggregation.

Handlers are plain functions (Starlette runs them in its thread pool, each thread with its own read-only
connection); responses are encoded with orjson. Bad parameters answer 400 naming the parameter, never 500.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dlscope.distributed.job import physical_gpus, run_aggregations
from dlscope.errors import DlscopeError
from dlscope.store import reader
from dlscope.viewer import export, python_view, timeline
from dlscope.viewer.derived import DerivedCache, derived_page
from dlscope.viewer.jobs import Reaggregator
from dlscope.viewer.pages import error_page, shell
from dlscope.viewer.params import BadParameter, parse_int, parse_table_request
from dlscope.viewer.profile_db import ProfileDB, QueryTimeout
from dlscope.viewer.query import searched_columns, warm_up
from dlscope.viewer.security import SameOriginWrites, allowed_hosts
from dlscope.viewer.tables import TABLES, column_meta, in_database
from dlscope.viewer.views import DERIVED, VIEWS, page_scope, table_page, view_data

STATIC = Path(__file__).resolve().parent / "static"
#: dlscope databases listed per folder for the Compare view's run picker
MAX_CANDIDATES = 200


class JSON(Response):
    media_type = "application/json"

    def render(self, content) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


class Viewer:
    """The databases being viewed and the background re-aggregator."""

    def __init__(self, db_paths: Sequence[str | Path], aggregate: Callable | None = None,
                 gpu_spec: str | Path | None = None):
        self.dbs = [ProfileDB(p, str(i)) for i, p in enumerate(db_paths)]
        self.jobs = Reaggregator(aggregate)
        self.gpu_spec = gpu_spec            # the roofline's ceilings when the GPU is not in the table
        self.derived = DerivedCache()       # roofline reports and comparisons, computed once
        self._open_lock = threading.Lock()
        for db in self.dbs:
            threading.Thread(target=self._warm, args=(db,), daemon=True, name="dlscope-warm-up").start()

    @staticmethod
    def _warm(db: ProfileDB) -> None:
        try:  # the timeline's rank first: read from its stored arrays it takes a tenth of the tables' name lists
            timeline.warm(db)
            warm_up(db, TABLES.values())
        except Exception:  # warming is an optimisation; requests compute the same on demand
            pass

    def candidates(self) -> list[dict]:
        """Profile databases the Compare view can open: every loaded one, and every dlscope database in the
        folders of the loaded ones (the run next to this one), by path; files that are not dlscope databases
        are left out."""
        loaded = {str(d.path): d for d in self.dbs}
        out: list[dict[str, Any]] = [{"path": p, "name": d.profile_name, "key": d.key} for p, d in loaded.items()]
        folders = sorted({d.path.parent for d in self.dbs})
        for folder in folders:
            try:
                files = sorted(p for p in folder.iterdir() if p.suffix in (".sqlite", ".db") and p.is_file())
            except OSError:
                continue
            for path in files[:MAX_CANDIDATES]:
                if str(path.resolve()) in loaded:
                    continue
                try:
                    meta, _, _ = reader.inspect(path)
                except DlscopeError:
                    continue
                out.append({"path": str(path.resolve()), "name": meta.get("profile_name") or path.stem, "key": None})
        return out

    def open_db(self, path: str) -> ProfileDB:
        """Open one of :meth:`candidates` (only those: a request cannot name any other file)."""
        with self._open_lock:
            for d in self.dbs:
                if str(d.path) == path:
                    return d
            if path not in {c["path"] for c in self.candidates()}:
                raise BadParameter("path", "is not a profile database next to the ones being viewed")
            db = ProfileDB(path, str(len(self.dbs)))
            self.dbs.append(db)
            threading.Thread(target=self._warm, args=(db,), daemon=True, name="dlscope-warm-up").start()
            return db

    def db(self, params) -> ProfileDB:
        raw = params.get("db") or "0"
        i = parse_int("db", raw, 0, len(self.dbs) - 1)
        return self.dbs[i]

    def boot(self, db: ProfileDB, view_slug: str, agg: int | None = None) -> dict:
        ranks = _run(db, agg)
        multi = len(ranks) > 1
        hidden = {"gpus": _gpu_count(db) < 2, "compare": False, "ranks": not multi, "collectives": not multi,
                  "python": not python_view.threads(db)}
        return {"view": view_slug, "db": db.key, "profile_name": db.profile_name, "notice": db.notice,
                "profiles": [{"key": d.key, "name": d.profile_name, "path": str(d.path)} for d in self.dbs],
                "aggregations": db.aggregations(), "run": ranks,
                "views": [{"slug": v.slug, "title": v.title, "menu": v.in_menu and not hidden.get(v.slug, False)}
                          for v in VIEWS.values()],
                "tables": {name: {"title": s.title, "columns": column_meta(s), "default_sort": s.default_sort,
                                  "default_order": "desc" if s.default_desc else "asc", "huge": s.huge,
                                  "searched": [c.label for c in searched_columns(s)],
                                  "available": db.has(*s.requires)}
                           for name, s in {**TABLES, **{n: d[0] for n, d in DERIVED.items()}}.items()}}


def _gpu_count(db: ProfileDB) -> int:
    """Physical GPUs (each once, idle ones included): the GPUs view is offered from two on, as in DLProf."""
    return len(physical_gpus(db.connection())) if db.has("gpus") else 0


def _run(db: ProfileDB, agg: int | None) -> list[dict]:
    """[{rank, agg_id}] of the aggregation run shown (the Rank menu)."""
    if not db.has("aggregations"):
        return []
    return [{"rank": a["rank"], "agg_id": a["agg_id"]} for a in run_aggregations(db.connection(), agg)]


def _scope_text(db: ProfileDB, scope: dict) -> str:
    """Which rank and aggregation an export shows, for its header."""
    agg = next((a for a in db.aggregations() if a["agg_id"] == scope.get("agg")), None)
    if agg is None:
        return ""
    ranks = len(_run(db, agg["agg_id"]))
    return f"aggregation {agg['agg_id']}" + (f" · rank {agg['rank']} of a job of {ranks} ranks" if ranks > 1 else "")


def _wants_json(request: Request) -> bool:
    return request.query_params.get("_format") == "json"


def _error(request: Request, status: int, title: str, message: str, param: str | None = None, hint: str = ""):
    if request.url.path.startswith("/api/") or _wants_json(request):
        return JSON({"error": message, "parameter": param, "hint": hint or None}, status_code=status)
    return HTMLResponse(error_page(status, title, message, hint), status_code=status)


def create_app(db_paths: Sequence[str | Path], aggregate: Callable | None = None,
               gpu_spec: str | Path | None = None, hosts: Sequence[str] | None = None) -> Starlette:
    """Build the ASGI app over ``db_paths`` (checked now: a bad database fails before the server starts).
    ``hosts``: the Host allow-list (default: the loopback names; see ``viewer.security``)."""
    viewer = Viewer(db_paths, aggregate, gpu_spec)

    def view_page(request: Request):
        slug = request.path_params.get("view", "dashboard")
        view = VIEWS.get(slug)
        if view is None:
            return _error(request, 404, "No such view", f"there is no view called {slug!r}",
                          hint="Pick a view from the View menu.")
        db = viewer.db(request.query_params)
        data = view_data(db, view, request.query_params, viewer)  # validates every parameter, even for HTML
        if _wants_json(request):
            return JSON(data)
        boot = viewer.boot(db, slug, data.get("scope", {}).get("agg"))
        boot["initial"] = data
        return HTMLResponse(shell(view.title, boot))

    def api_meta(request: Request):
        db = viewer.db(request.query_params)
        return JSON(viewer.boot(db, "dashboard"))

    def api_view(request: Request):
        view = VIEWS.get(request.path_params["view"])
        if view is None:
            return _error(request, 404, "No such view", f"there is no view called {request.path_params['view']!r}")
        return JSON(view_data(viewer.db(request.query_params), view, request.query_params, viewer))

    def api_table(request: Request):
        name = request.path_params["table"]
        if name not in TABLES and name not in DERIVED:
            return _error(request, 404, "No such table", f"there is no table called {name!r}")
        db = viewer.db(request.query_params)
        scope = page_scope(db, request.query_params)
        if name in DERIVED:
            spec, source = DERIVED[name]
            return JSON(derived_page(source(viewer, db, scope, request.query_params), spec, request.query_params))
        return JSON(table_page(db, name, request.query_params, scope))

    def api_export(request: Request):
        name, fmt = request.path_params["table"], request.path_params["fmt"]
        if name not in TABLES and name not in DERIVED:
            return _error(request, 404, "No such table", f"there is no table called {name!r}")
        if fmt not in ("csv", "tsv", "json", "xlsx", "pdf"):
            raise BadParameter("format", f"{fmt!r}: use csv, tsv, json, xlsx or pdf")
        titled = request.query_params.get("title") in ("1", "true")
        db = viewer.db(request.query_params)
        scope = page_scope(db, request.query_params)
        if name in DERIVED:
            spec, source = DERIVED[name]
            db = source(viewer, db, scope, request.query_params)
        else:
            spec = in_database(TABLES[name], db)
        req = parse_table_request(spec, request.query_params, "", {k: v for k, v in scope.items() if spec.scope(k)})
        filename = export.export_filename(db, req, fmt)
        headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
        if fmt in ("csv", "tsv"):
            title = export.export_title(db, req) if titled else None
            return StreamingResponse(export.csv_chunks(db, req, "\t" if fmt == "tsv" else ",", title),
                                     media_type=f"text/{'tab-separated-values' if fmt == 'tsv' else 'csv'}; "
                                                "charset=utf-8",
                                     headers=headers)
        if fmt == "json":
            return StreamingResponse(export.json_chunks(db, req), media_type="application/json", headers=headers)
        if fmt == "pdf":
            shown = _scope_text(viewer.db(request.query_params), scope) if spec.scope("agg") else ""
            return Response(export.write_pdf(db, req, shown),
                            media_type="application/pdf", headers=headers)
        path = export.write_xlsx(db, req)
        return FileResponse(path, filename=filename, background=BackgroundTask(os.unlink, path),
                            media_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")

    def api_trace(request: Request):
        """The profile as a Chrome trace (Perfetto UI, chrome://tracing): what `dlscope export` writes, for
        ``iterations`` (A:B) of the page's aggregation and ``rank`` when given; a GET download, streamed."""
        from dlscope.present.trace_export import parse_iterations, trace_chunks

        params = request.query_params
        db = viewer.db(params)
        scope = page_scope(db, params)
        window = None
        if params.get("iterations"):
            try:
                window = parse_iterations(params["iterations"])
            except DlscopeError as e:
                raise BadParameter("iterations", str(e).split(": ", 1)[-1]) from None
        rank = parse_int("rank", params["rank"]) if params.get("rank") else None
        try:
            chunks = trace_chunks(db.path, window, rank, scope.get("agg"))
        except DlscopeError as e:  # a rank or iteration range the profile does not have: say which parameter
            text = str(e)
            raise BadParameter("rank" if text.startswith("--rank") else "iterations", text.split(": ", 1)[-1]) from None
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in db.profile_name) or "profile"
        suffix = f"-iterations-{str(window).replace(':', '-')}" if window else ""
        suffix += f"-rank{rank}" if rank is not None else ""
        return StreamingResponse(chunks, media_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="{safe}{suffix}.trace.json"'})

    async def api_aggregate(request: Request):
        db = viewer.db(request.query_params)
        try:
            body = orjson.loads(await request.body() or b"{}")
        except orjson.JSONDecodeError:
            raise BadParameter("body", "must be JSON: {iter_start, iter_stop, key_node}") from None
        if not isinstance(body, dict):
            raise BadParameter("body", "must be a JSON object")
        start = body.get("iter_start")
        stop = body.get("iter_stop")
        for name, value in (("iter_start", start), ("iter_stop", stop)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise BadParameter(name, "must be a non-negative whole number")
        if start is not None and stop is not None and start > stop:
            raise BadParameter("iter_stop", f"{stop} is before iter_start {start}")
        key_node = body.get("key_node") or None
        if key_node is not None and not isinstance(key_node, str):
            raise BadParameter("key_node", "must be an op name")
        job = viewer.jobs.start(db, start, stop, key_node)
        return JSON(job, status_code=202)

    def api_timeline(request: Request):
        db = viewer.db(request.query_params)
        rank, start, end, width = timeline.parse_window(db, request.query_params)
        return JSON(timeline.window(db, rank, start, end, width))

    def api_timeline_event(request: Request):
        db = viewer.db(request.query_params)
        kind = request.query_params.get("kind") or ""
        event_id = parse_int("id", request.query_params.get("id") or "")
        found = timeline.event_details(db, kind, event_id)
        if found is None:
            return _error(request, 404, "No such event", f"there is no {kind} {event_id} in this profile")
        return JSON(found)

    def api_python_tree(request: Request):
        return JSON(python_view.tree(viewer.db(request.query_params), request.query_params))

    def api_python_ops(request: Request):
        return JSON(python_view.frame_ops(viewer.db(request.query_params), request.query_params))

    def api_databases(request: Request):
        return JSON({"databases": viewer.candidates()})

    async def api_open_database(request: Request):
        try:
            body = orjson.loads(await request.body() or b"{}")
        except orjson.JSONDecodeError:
            raise BadParameter("body", "must be JSON: {path}") from None
        path = body.get("path") if isinstance(body, dict) else None
        if not isinstance(path, str) or not path:
            raise BadParameter("path", "give the path of one of the databases listed by GET /api/databases")
        db = viewer.open_db(path)
        return JSON({"key": db.key, "name": db.profile_name, "path": str(db.path)})

    def api_job(request: Request):
        job_id = parse_int("job", request.path_params["job"])
        job = viewer.jobs.jobs.get(job_id)
        if job is None:
            return _error(request, 404, "No such job", f"there is no re-aggregation job {job_id}")
        return JSON(job)

    def root(request: Request):
        query = ("?" + str(request.query_params)) if request.query_params else ""
        db = viewer.db(request.query_params)
        only_python = not db.aggregations() and bool(python_view.threads(db))  # a cProfile output
        return RedirectResponse(("/python" if only_python else "/dashboard") + query)

    # Starlette types every handler as taking an Exception; each is registered for its own class below
    async def bad_parameter(request: Request, exc: Exception):
        assert isinstance(exc, BadParameter)
        return _error(request, 400, "Bad parameters found in URL", str(exc), exc.name,
                      hint="Fix or remove the parameter; the view's defaults apply when it is absent.")

    async def timeout(request: Request, exc: Exception):  # a QueryTimeout
        return _error(request, 503, "Query took too long", str(exc))

    async def user_error(request: Request, exc: Exception):  # a DlscopeError
        return _error(request, 400, "Cannot show this", str(exc))

    async def not_found(request: Request, exc):
        return _error(request, 404, "Not found", f"nothing at {request.url.path}")

    routes = [
        Route("/", root),
        Route("/api/meta", api_meta),
        Route("/api/view/{view}", api_view),
        Route("/api/table/{table}", api_table),
        Route("/api/timeline", api_timeline),
        Route("/api/timeline/event", api_timeline_event),
        Route("/api/python/tree", api_python_tree),
        Route("/api/python/ops", api_python_ops),
        Route("/api/table/{table}/export.{fmt}", api_export),
        Route("/api/trace.json", api_trace),
        Route("/api/aggregate", api_aggregate, methods=["POST"]),
        Route("/api/databases", api_databases),
        Route("/api/databases", api_open_database, methods=["POST"]),
        Route("/api/jobs/{job}", api_job),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/{view}", view_page),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        viewer.jobs.shutdown()

    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts or allowed_hosts()), www_redirect=False),
                  Middleware(SameOriginWrites)]
    app = Starlette(routes=routes, exception_handlers={BadParameter: bad_parameter, QueryTimeout: timeout,
                                                       DlscopeError: user_error, 404: not_found},
                    lifespan=lifespan, middleware=middleware)
    app.state.viewer = viewer
    return app
