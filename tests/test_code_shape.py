"""The shape of the library's code, kept by tests.

- A private name (`_name`) is used only in the module that defines it: no
  module of `ssljax/` imports another module's `_name` or reads
  `module._name` / `obj.attr._name`. A helper two modules need is a public
  name of a shared module (`ssljax.checks`, `ssljax.graphs`).
- The library is layered: its parts (a subpackage or a top-level module of
  `ssljax`) import each other without a cycle, counting imports inside
  functions; the longest chain of imports, with the benchmarks and
  experiments on top, is at most MAX_LAYERS parts; and the probe maths,
  the theory, PAL and what they stand on never import the methods.
- Code, configs, tests and experiments cite papers by authors, year, title
  or arXiv id and equation, never a file outside the repository.
- The loss library does not import the active-learning package.
- No two modules of `ssljax.data` import each other, directly or through
  other modules of the package, counting imports inside functions too.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LAYERS = 8


def _library_modules():
  return sorted((ROOT / "ssljax").rglob("*.py"))


def private_uses(path: pathlib.Path) -> list[str]:
  """`file:line name` for each use of another module's private name."""
  tree = ast.parse(path.read_text())
  found, modules = [], set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "ssljax"):
      for alias in node.names:
        if alias.name.startswith("_") and not alias.name.startswith("__"):
          found.append(f"{path}:{node.lineno} imports {alias.name}")
        else:
          modules.add(alias.asname or alias.name)
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.startswith("ssljax"):
          modules.add(alias.asname or alias.name.split(".")[0])
  for node in ast.walk(tree):
    if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__")):
      continue
    owner = node.value
    if (isinstance(owner, ast.Name) and owner.id in modules) or isinstance(
        owner, ast.Attribute):
      found.append(f"{path}:{node.lineno} reads {ast.unparse(node)}")
  return found


def test_no_private_name_crosses_a_module():
  uses = [u for p in _library_modules() for u in private_uses(p)]
  assert not uses, "\n".join(uses)


@pytest.mark.parametrize("folder", ["experiments", "benchmarks"])
def test_scripts_use_only_public_library_names(folder):
  uses = [u for p in sorted((ROOT / folder).glob("*.py"))
          for u in private_uses(p)]
  assert not uses, "\n".join(uses)


# Files outside the repository that code once pointed to (spelled in two
# parts so that this file does not match itself).
_OUTSIDE = ("FIND" + "INGS", "shared" + "/papers", "../" + "shared",
            "DESIGN" + ".md", "STYLE" + ".md")


@pytest.mark.parametrize("folder",
                         ["ssljax", "tests", "experiments", "configs",
                          "benchmarks"])
def test_no_reference_outside_the_repository(folder):
  pattern = re.compile("|".join(re.escape(s) for s in _OUTSIDE), re.I)
  hits = []
  for path in sorted((ROOT / folder).rglob("*")):
    if path.suffix not in (".py", ".md", ".txt", ".toml", ".yaml", ".json"):
      continue
    for i, line in enumerate(path.read_text().splitlines(), 1):
      if pattern.search(line):
        hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
  assert not hits, "\n".join(hits)


def test_losses_do_not_depend_on_active_learning():
  """ssljax.losses is used by ssljax.pal, never the other way round."""
  uses = []
  for path in sorted((ROOT / "ssljax" / "losses").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
               else [a.name for a in node.names]
               if isinstance(node, ast.Import) else [])
      uses += [f"{path.name}:{node.lineno} {n}" for n in names
               if n == "ssljax.pal" or n.startswith("ssljax.pal.")]
  assert not uses, uses


def package_imports(folder: pathlib.Path, package: str) -> dict[str, set[str]]:
  """Module -> the modules of the same package it imports.

  Modules are the ``*.py`` files of ``folder`` by stem ("__init__" is the
  package itself). Every import statement counts, at the top of a module or
  inside a function or class. ``from package import name`` points at the
  submodule ``name`` if there is one, else at "__init__"; importing a
  submodule is not counted as importing "__init__".
  """
  modules = {p.stem for p in folder.glob("*.py")}

  def target(dotted: str, name: str | None = None) -> str | None:
    parts = dotted.split(".") if dotted else []
    if parts[:len(package.split("."))] != package.split("."):
      return None
    rest = parts[len(package.split(".")):]
    if rest:
      return rest[0] if rest[0] in modules else None
    return name if name in modules else "__init__"

  graph = {}
  for path in sorted(folder.glob("*.py")):
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        found |= {target(a.name) for a in node.names}
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: "." is this package, ".." its parent
          parent = package.rsplit(".", node.level - 1)[0]
          base = ".".join([parent] + ([base] if base else []))
        found |= {target(base, a.name) for a in node.names}
    graph[path.stem] = found - {None, path.stem}
  return graph


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
  """Pairs "a <-> b" of modules that reach each other by imports."""
  reach = {start: reachable(graph, start) for start in graph}
  return [f"{a} <-> {b}" for a in sorted(graph) for b in sorted(reach[a])
          if a < b and a in reach.get(b, ())]


def test_data_modules_import_no_cycle():
  """ssljax.data's modules form a hierarchy: no two import each other."""
  graph = package_imports(ROOT / "ssljax" / "data", "ssljax.data")
  assert "splits" in graph and "sources" in graph["splits"], graph
  cycles = import_cycles(graph)
  assert not cycles, f"import cycles in ssljax.data: {cycles}; {graph}"


def test_import_cycles_are_found_through_function_level_imports(tmp_path):
  files = {
      "__init__.py": "from pkg.a import f\n",
      "a.py": "from pkg import b\n\ndef f():\n  return b\n",
      "b.py": "import numpy as np\n\n\ndef g():\n  from pkg.c import h\n",
      "c.py": "def h():\n  from . import a\n",
      "d.py": "from pkg.a import f\n",
  }
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  graph = package_imports(tmp_path, "pkg")
  assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"},
                   "d": {"a"}}
  assert import_cycles(graph) == ["a <-> b", "a <-> c", "b <-> c"]
  graph["d"].add("__init__")  # `from pkg import f`: the package's name
  graph["__init__"].add("d")
  assert "__init__ <-> d" in import_cycles(graph)


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list:
  """Dotted names an import statement brings in (``from a import b`` gives
  "a.b"; relative imports resolved against ``module``)."""
  if isinstance(node, ast.Import):
    return [a.name for a in node.names]
  if not isinstance(node, ast.ImportFrom):
    return []
  base = node.module or ""
  if node.level:
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
      package = package.rpartition(".")[0]
    base = ".".join(filter(None, [package, base]))
  return [f"{base}.{a.name}" for a in node.names]


def part_imports(root: pathlib.Path) -> dict[str, set[str]]:
  """Part -> the parts it imports. A part is a subpackage or a top-level
  module of ``root/ssljax`` (its name: "losses", "train"), or all of
  ``root/benchmarks`` or ``root/experiments``. Every import statement
  counts, at the top of a module or inside a function."""
  def part(dotted: str):
    parts = dotted.split(".")
    return parts[1] if parts[0] == "ssljax" and len(parts) > 1 else None

  graph: dict[str, set[str]] = {}
  for path in sorted((root / "ssljax").rglob("*.py")):
    rel = path.relative_to(root).with_suffix("").parts
    is_package = rel[-1] == "__init__"
    module = ".".join(rel[:-1] if is_package else rel)
    if module == "ssljax":
      continue
    own = part(module)
    found = graph.setdefault(own, set())
    for node in ast.walk(ast.parse(path.read_text())):
      found |= {part(n) for n in _imported_names(node, module, is_package)}
  for folder in ("benchmarks", "experiments"):
    found = graph.setdefault(folder, set())
    for path in sorted((root / folder).glob("*.py")):
      for node in ast.walk(ast.parse(path.read_text())):
        found |= {part(n) for n in _imported_names(node, folder, False)}
  return {k: v - {None, k} for k, v in graph.items()}


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
  """The longest path a -> b -> ... of an acyclic import graph."""
  memo: dict[str, list[str]] = {}

  def chain(node):
    if node not in memo:
      tails = [chain(n) for n in sorted(graph.get(node, ()))]
      memo[node] = [node] + max(tails, key=len, default=[])
    return memo[node]

  return max((chain(n) for n in sorted(graph)), key=len, default=[])


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
  """The nodes reached from ``start`` by one or more edges."""
  seen, todo = set(), [start]
  while todo:
    for nxt in graph.get(todo.pop(), ()):
      if nxt not in seen:
        seen.add(nxt)
        todo.append(nxt)
  return seen


def test_library_parts_are_layered():
  graph = part_imports(ROOT)
  assert {"losses", "methods", "probes", "train", "benchmarks"} <= set(graph)
  cycles = import_cycles(graph)
  assert not cycles, f"import cycles between parts of ssljax: {cycles}"
  chain = longest_chain(graph)
  assert len(chain) <= MAX_LAYERS, " -> ".join(chain)


@pytest.mark.parametrize("part", ["probes", "cross_validation", "pal",
                                  "theory", "losses", "graphs", "data",
                                  "models", "metrics"])
def test_maths_below_the_methods(part):
  """The probe maths, PAL, the theory and the losses serve the methods and
  the evaluators; they never import them."""
  above = reachable(part_imports(ROOT), part) & {"methods", "evaluators",
                                                 "train", "inputs"}
  assert not above, f"ssljax.{part} imports {sorted(above)}"


def test_part_imports_and_chains_on_a_small_tree(tmp_path):
  files = {
      "ssljax/__init__.py": "",
      "ssljax/low.py": "import numpy\n",
      "ssljax/pkg/__init__.py": "from ssljax.pkg.inner import f\n",
      "ssljax/pkg/inner.py": "def f():\n  from ssljax import low\n",
      "ssljax/top.py": "from ssljax import pkg\nfrom .pkg import inner\n",
      "benchmarks/b.py": "from ssljax.top import x\n",
      "experiments/e.py": "import ssljax.low\n",
  }
  for name, text in files.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
  graph = part_imports(tmp_path)
  assert graph == {"low": set(), "pkg": {"low"}, "top": {"pkg"},
                   "benchmarks": {"top"}, "experiments": {"low"}}
  assert longest_chain(graph) == ["benchmarks", "top", "pkg", "low"]
  assert reachable(graph, "top") == {"pkg", "low"}
