"""The HTML shell every view shares, and the error page; every value inserted is HTML-escaped.

The shell carries the navigation bar (views, aggregation, profile, help) and a boot JSON blob; the view's
content is drawn by static/js/main.mjs from the JSON API, so names from traces only ever reach the page as
text (Tabulator/ECharts formatters escape, and our own code uses textContent).
"""

from __future__ import annotations

import html
from importlib.metadata import PackageNotFoundError, version

import orjson

try:
    VERSION = version("dlscope")
except PackageNotFoundError:  # running from a source tree
    VERSION = "dev"


def _json_for_script(data) -> str:
    return orjson.dumps(data).decode().replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def shell(title: str, boot: dict) -> str:
    t = html.escape(title)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{t} · dlscope</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/vendor/tabulator.min.css">
<link rel="stylesheet" href="/static/app.css">
<link rel="modulepreload" href="/static/vendor/tabulator_esm.min.mjs">
</head>
<body>
<header class="navbar">
  <a class="brand" href="/dashboard" title="Go to the Dashboard"><span class="logo">◆</span> dlscope <span
     class="brand-sub">Viewer</span></a>
  <nav class="nav-controls">
    <label>View <select id="nav-view" aria-label="View"></select></label>
    <label id="nav-agg-wrap" hidden>Aggregation <select id="nav-agg" aria-label="Aggregation"></select></label>
    <label id="nav-rank-wrap" hidden>Rank <select id="nav-rank" aria-label="Rank"></select></label>
    <label id="nav-db-wrap" hidden>Profile <select id="nav-db" aria-label="Profile"></select></label>
  </nav>
  <span class="profile-name" id="nav-profile"></span>
  <div class="help">
    <button class="help-btn" type="button">Help ▾</button>
    <div class="help-menu">
      <a href="https://github.com/dlscope/dlscope#readme" target="_blank" rel="noopener">dlscope documentation</a>
      <a href="https://docs.nvidia.com/deeplearning/frameworks/dlprof-viewer-user-guide/"
         target="_blank" rel="noopener">DLProf Viewer guide (the model for these views)</a>
      <a href="https://github.com/dlscope/dlscope/issues"
         target="_blank" rel="noopener">Contact us / report a problem</a>
    </div>
  </div>
</header>
<div id="banners"></div>
<div class="layout">
  <main id="content" aria-live="polite"><div class="loading">Loading…</div></main>
  <aside id="details" hidden></aside>
</div>
<footer class="footer">dlscope {html.escape(VERSION)} · times in readable units, hover for exact nanoseconds</footer>
<script type="application/json" id="boot">{_json_for_script(boot)}</script>
<script type="module" src="/static/js/main.mjs"></script>
</body>
</html>
"""


def error_page(status: int, title: str, message: str, hint: str = "") -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · dlscope</title>
<link rel="stylesheet" href="/static/app.css"></head>
<body><header class="navbar"><a class="brand" href="/dashboard"><span class="logo">◆</span> dlscope <span
  class="brand-sub">Viewer</span></a></header>
<main class="error-page"><h1>{status} · {html.escape(title)}</h1>
<p class="error-message">{html.escape(message)}</p>
<p class="error-hint">{html.escape(hint)}</p>
<p><a href="/dashboard">Back to the Dashboard</a></p></main></body></html>
"""
