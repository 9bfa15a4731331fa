"""PAL with people: a query page, answers in a database, training on them.

``python -m ssljax.pal.serve --config configs/pal_human.py --workdir DIR``
serves pair queries ("are these two images the same kind of thing?") chosen
by the active strategy of Cabannes et al. 2023 (arXiv 2303.15256,
Algorithm 3, asked one pair at a time) over the current model, stores every
answer in a database (SQLite or PostgreSQL, through SQLAlchemy), and trains
the PAL loss on the graph the answers build in background rounds.

Modules: `db` (schema, migration, tokens, export), `strategy` (graph from
votes, active and passive pairs; NumPy only), `rounds` (one training
round), `service` (state, queries, answers, the round worker), `app` (HTTP
routes), `page` (the annotation page), `pool` (the images), `simulate`
(a service process and simulated annotators, for tests and benchmarks). Needs the
``serve`` extra (starlette, uvicorn, sqlalchemy, psycopg).
"""
