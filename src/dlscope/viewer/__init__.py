"""The web viewer: DLProf Viewer's views over a dlscope profile database.

Flow: ``cli_view`` starts ``app`` (Starlette); ``profile_db`` opens databases read-only; ``tables`` declares
every table the views show; ``query`` turns URL parameters into bound SQL; ``export`` streams whole results;
``dashboard`` assembles the summary panels; ``jobs`` runs re-aggregation in the background. The browser side
lives in ``static/`` (own modules) and ``static/vendor/`` (npm packages copied by ``vendor``).
"""
