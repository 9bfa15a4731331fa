"""The documentation site: builds strictly, renders its maths offline, no errors.

1. `mkdocs build --strict` (once per module, into a temporary directory): a
   broken link, a missing API object or a docstring that fails to render is
   an error.
2. Every page of the built site is opened in headless Chromium (playwright,
   Debian's /usr/bin/chromium) from a local HTTP server on 127.0.0.1; requests
   to any other host are refused, so the site must work offline. Every page
   must load without console errors; every theory page must have typeset
   equations (MathJax output present, no raw TeX delimiters left in the
   visible text). Screenshots of the paper-002 theory page and of the
   `ssljax.losses` API page are saved under the test's tmp_path.

`make setup` installs chromium and the `docs` extra (mkdocs-material,
mkdocstrings[python], playwright); without them these tests fail, they do not
skip.
"""

import functools
import http.server
import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
THEORY_PAGES = ["theory/000_supervised.html", "theory/001_spectral.html",
                "theory/002_pal.html", "theory/003_dynamics.html",
                "theory/004_frossl.html"]
# Raw TeX that MathJax should have replaced: \( \) \[ \] or $...$.
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$[^$\s][^$]*\$")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  """Builds the site once for this module; returns its directory."""
  out = tmp_path_factory.mktemp("site")
  proc = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
       "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
  if proc.returncode != 0:
    pytest.fail("mkdocs build --strict failed (is the docs extra installed? "
                "`make setup`):\n" + proc.stdout[-4000:] + proc.stderr[-8000:])
  return out


def test_build_strict(site):
  pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
  for page in ["index.html", "getting_started.html", "results.html",
               "reproducing.html", "api/losses.html", *THEORY_PAGES]:
    assert page in pages, (page, pages)
  losses = (site / "api" / "losses.html").read_text()
  for name in ["vicreg_two_view", "simclr_terms", "spectral_contrastive_two_view",
               "frossl_terms", "wmse_two_view", "edge_vic2_terms",
               "sinkhorn_knopp", "swav", "dinov2_terms", "gram_anchoring"]:
    assert f'id="ssljax.losses.{name}"' in losses, name


@pytest.fixture(scope="module")
def server(site):
  """Serves the built site on 127.0.0.1 from a thread; yields its base URL."""
  handler = functools.partial(_QuietHandler, directory=str(site))
  httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=httpd.serve_forever, daemon=True)
  thread.start()
  yield f"http://127.0.0.1:{httpd.server_address[1]}/"
  httpd.shutdown()
  httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):

  def log_message(self, *args):
    pass


@pytest.fixture(scope="module")
def browser():
  try:
    from playwright.sync_api import sync_playwright  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    pytest.fail(f"playwright is not installed ({e}); `make setup` installs "
                "the docs extra")
  if not os.path.exists(CHROMIUM):
    pytest.fail(f"{CHROMIUM} not found; `make setup` installs Debian's "
                "chromium package")
  with sync_playwright() as pw:
    b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                           headless=True)
    yield b
    b.close()


PAGES_AT_ONCE = 3


class _Tab:
  """A tab of `context` that records its console errors and refused
  off-site requests, as `_open` does, for one navigation at a time."""

  def __init__(self, context):
    self.page = context.new_page()
    self.errors, self.offsite = [], []
    self.search_index = None  # text served for the search index; None: the file
    self.page.on("console", lambda m: self.errors.append(m.text)
                 if m.type == "error" else None)
    self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
    self.page.route("**/*", self._route)

  def _route(self, r):
    url = r.request.url
    if (self.search_index is not None and url.startswith("http://127.0.0.1:")
        and url.endswith("/search/search_index.json")):
      r.fulfill(status=200, content_type="application/json",
                body=self.search_index)
    elif url.startswith("http://127.0.0.1:"):
      r.continue_()
    else:
      self.offsite.append(r.request.url)
      r.abort()

  def start(self, url):
    self.errors.clear()
    self.offsite.clear()
    self.page.goto(url, wait_until="commit")

  def finish(self):
    """Waits as `_open` does; returns (console errors, off-site requests)."""
    self.page.wait_for_load_state("load")
    _wait_for_mathjax_and_fonts(self.page)
    return list(self.errors), list(self.offsite)


def _wait_for_mathjax_and_fonts(page):
  # Typesetting is asynchronous: wait until MathJax has finished the page.
  page.wait_for_function(
      "() => window.MathJax && MathJax.startup && MathJax.startup.promise")
  page.evaluate("() => MathJax.startup.promise")
  page.evaluate("() => document.fonts.ready")


def _open(browser, url):
  """Opens url; returns (page, console errors, refused off-site requests)."""
  page = browser.new_page(viewport={"width": 1280, "height": 900})
  errors, offsite = [], []
  page.on("console", lambda m: errors.append(m.text)
          if m.type == "error" else None)
  page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))

  def route(r):
    if r.request.url.startswith("http://127.0.0.1:"):
      r.continue_()
    else:
      offsite.append(r.request.url)
      r.abort()

  page.route("**/*", route)
  page.goto(url, wait_until="load")
  _wait_for_mathjax_and_fonts(page)
  return page, errors, offsite


def test_pages_without_console_errors(site, server, browser):
  # The theory pages' console and requests: test_theory_equations_render.
  pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                 if p.name != "404.html"
                 and p.relative_to(site).as_posix() not in THEORY_PAGES)
  # One browser context (a context per page cost ~0.4 s a page) with
  # PAGES_AT_ONCE tabs loading at the same time: each tab's navigation is
  # started, then each is awaited as `_open` does (load, MathJax, fonts).
  # Every request still goes through the route that refuses other hosts, so
  # nothing comes from a cache. The search index is the same file on every
  # page and the search worker's indexing of it was ~60% of the browser's
  # CPU time here: index.html gets the real index (as do the theory pages
  # and the API page in the tests below), every other page an index with the
  # same config and no documents.
  real_index = (site / "search" / "search_index.json").read_text()
  stub_index = json.dumps({**json.loads(real_index), "docs": []})
  assert "index.html" in pages, pages
  context = browser.new_context(viewport={"width": 1280, "height": 900})
  try:
    tabs = [_Tab(context) for _ in range(PAGES_AT_ONCE)]
    problems = {}
    for i in range(0, len(pages), PAGES_AT_ONCE):
      batch = list(zip(tabs, pages[i:i + PAGES_AT_ONCE]))
      for tab, rel in batch:
        tab.search_index = None if rel == "index.html" else stub_index
        tab.start(server + rel)
      for tab, rel in batch:
        errors, offsite = tab.finish()
        if errors or offsite:
          problems[rel] = {"console errors": errors,
                           "off-site requests": offsite}
  finally:
    context.close()
  assert len(pages) >= 50, pages
  assert not problems, problems


@pytest.mark.parametrize("rel", THEORY_PAGES)
def test_theory_equations_render(server, browser, rel, tmp_path):
  page, errors, offsite = _open(browser, server + rel)
  try:
    n_math = page.locator(".arithmatex").count()
    n_typeset = page.locator(".arithmatex mjx-container").count()
    raw = RAW_TEX.findall(page.inner_text("article"))
    merrors = page.locator("mjx-merror").count()
    # A typeset character draws its glyph through CSS ::before; without the
    # character styles the equations take space but show nothing.
    blank = page.evaluate("""() => [...document.querySelectorAll(
        '.arithmatex mjx-c')].filter(c => getComputedStyle(c, '::before')
        .content === 'none').length""")
    if rel == "theory/002_pal.html":
      page.screenshot(path=str(tmp_path / "theory_002_pal.png"), full_page=True)
  finally:
    page.close()
  assert n_math >= 5, f"{rel}: only {n_math} equations"
  assert n_typeset == n_math, f"{rel}: {n_typeset} of {n_math} typeset"
  assert merrors == 0, f"{rel}: {merrors} TeX errors (mjx-merror)"
  assert blank == 0, f"{rel}: {blank} typeset characters without a glyph"
  assert not raw, f"{rel}: raw TeX left in the text: {raw[:5]}"
  assert not errors and not offsite, (errors, offsite)


def test_api_losses_screenshot(server, browser, tmp_path):
  page, errors, _ = _open(browser, server + "api/losses.html")
  try:
    assert page.locator('[id="ssljax.losses.vicreg_two_view"]').count() == 1
    page.screenshot(path=str(tmp_path / "api_losses.png"))
  finally:
    page.close()
  assert not errors, errors
  assert (tmp_path / "api_losses.png").stat().st_size > 10_000


def test_no_reference_to_files_outside_the_repository():
  # Spelled in pieces so that this file does not match itself.
  needles = ["FIND" + "INGS", "../" + "shared"]
  files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
  hits = []
  for f in files:
    path = ROOT / f
    if not path.is_file() or path.suffix in {".png", ".woff", ".gz"}:
      continue
    text = path.read_text(errors="replace")
    hits += [f"{f}: {n}" for n in needles if n in text]
  assert not hits, hits


def _defined_names(path):
  """{"Class::test", "test"} names defined in a test file (static, no import)."""
  import ast  # pylint: disable=import-outside-toplevel
  tree = ast.parse(path.read_text())
  names = set()
  for node in tree.body:
    if isinstance(node, ast.FunctionDef):
      names.add(node.name)
    elif isinstance(node, ast.ClassDef):
      for sub in node.body:
        if isinstance(sub, ast.FunctionDef):
          names.add(f"{node.name}::{sub.name}")
  return names


def test_cited_tests_exist():
  """Every `tests/x.py::Class::test` the pages cite is defined.

  A bare `::Class::test` refers to the file of the previous full id.
  """
  cite = re.compile(r"(tests/test_\w+\.py)?((?:::\w+)+)")
  missing, n = [], 0
  for md in sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]:
    current = None
    for m in cite.finditer(md.read_text()):
      current = m.group(1) or current
      if current is None:
        continue
      n += 1
      name = m.group(2)[2:]
      if name not in _defined_names(ROOT / current):
        missing.append(f"{md.relative_to(ROOT)}: {current}::{name}")
  assert n > 100, n
  assert not missing, missing


def test_readme_examples_run():
  """The README's Python examples run as printed (each in a fresh process)."""
  blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(),
                      flags=re.S)
  assert len(blocks) >= 2
  for code in blocks:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, code + proc.stderr[-3000:]


def test_no_bare_pipe_in_table_maths():
  """Inside a Markdown table a bare | in $...$ splits the cell: use \\lvert."""
  bad = []
  for md in sorted((ROOT / "docs").rglob("*.md")):
    for i, line in enumerate(md.read_text().split("\n"), 1):
      if line.startswith("|"):
        bad += [f"{md.relative_to(ROOT)}:{i}: {m}"
                for m in re.findall(r"\$[^$]+\$", line)
                if re.search(r"(?<!\\)\|", m)]
  assert not bad, bad
