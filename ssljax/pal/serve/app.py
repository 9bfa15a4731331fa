"""The HTTP layer of the annotation service (Starlette).

Routes (JSON; every ``/api/`` route needs ``Authorization: Bearer TOKEN``,
else 401):

* ``GET /healthz`` -> 200 ``{"ok": true}`` (no token).
* ``GET /`` -> the annotation page (`ssljax.pal.serve.page`).
* ``GET /images/{index}.png`` -> the pool image with that train-split
  index; any other path (another index, a file name, ``..``) -> 404.
* ``GET /api/query`` -> 200 ``{"query_id", "items": [i, j], "images":
  [url_i, url_j]}``; 204 when no pair is left for this annotator.
* ``POST /api/answer`` ``{"query_id": str, "answer": "same" | "different"
  | "skip"}`` -> 200 ``{"query_id", "answer", "stored"}`` once committed
  (``stored`` false: this annotator had answered it already, the first
  answer is kept). Body over ``server.max_body_bytes`` -> 413; not JSON or
  not an object -> 400; answer outside the three or query_id not a string
  -> 422; unknown query -> 404. An error writes nothing.
* ``GET /api/status`` -> 200: answers, pending queries, round, whether a
  round is training, the last round's metrics.

Handlers are plain functions: Starlette runs them in its thread pool, so a
database commit never blocks the event loop.
"""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ssljax.pal.serve import db
from ssljax.pal.serve.page import PAGE
from ssljax.pal.serve.pool import png_bytes
from ssljax.pal.serve.service import NotFound, Service

__all__ = ["create_app"]


def _error(status: int, message: str) -> JSONResponse:
  return JSONResponse({"error": message}, status_code=status)


def create_app(service: Service) -> Starlette:
  """The Starlette application over a `Service`."""
  max_body = int(service.config.server.max_body_bytes)

  def who(request: Request):
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
      return None
    return service.annotator(token.strip())

  def healthz(request: Request):
    del request
    return JSONResponse({"ok": True})

  def index(request: Request):
    del request
    return HTMLResponse(PAGE)

  def image(request: Request):
    raw = request.path_params["name"]
    stem, dot, ext = raw.partition(".")
    if dot != "." or ext != "png" or not stem.isdigit() or len(stem) > 12:
      return _error(404, "no such image")
    p = service.pos.get(int(stem))
    if p is None:
      return _error(404, "no such image")
    return Response(png_bytes(service.pool["images"][p]),
                    media_type="image/png",
                    headers={"Cache-Control": "max-age=3600"})

  def query(request: Request):
    user = who(request)
    if user is None:
      return _error(401, "missing or unknown bearer token")
    payload = service.next_query(user[0])
    if payload is None:
      return Response(status_code=204)
    return JSONResponse(payload)

  async def answer(request: Request):
    user = who(request)
    if user is None:
      return _error(401, "missing or unknown bearer token")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
      return _error(413, f"body over {max_body} bytes")
    body = b""
    async for chunk in request.stream():
      body += chunk
      if len(body) > max_body:
        return _error(413, f"body over {max_body} bytes")
    try:
      data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
      return _error(400, "body is not valid JSON")
    if not isinstance(data, dict):
      return _error(400, "body must be a JSON object")
    qid, ans = data.get("query_id"), data.get("answer")
    if not isinstance(qid, str):
      return _error(422, "query_id must be a string")
    if ans not in db.ANSWERS:
      return _error(422, f"answer must be one of {list(db.ANSWERS)}")
    from starlette.concurrency import run_in_threadpool  # pylint: disable=import-outside-toplevel
    try:
      result = await run_in_threadpool(service.answer, user[0], qid, ans)
    except NotFound:
      return _error(404, "unknown query_id")
    return JSONResponse(result)

  def status(request: Request):
    user = who(request)
    if user is None:
      return _error(401, "missing or unknown bearer token")
    return JSONResponse({**service.status(user[0]), "annotator": user[1]})

  routes = [
      Route("/healthz", healthz),
      Route("/", index),
      Route("/images/{name}", image),
      Route("/api/query", query),
      Route("/api/answer", answer, methods=["POST"]),
      Route("/api/status", status),
  ]
  return Starlette(routes=routes)
