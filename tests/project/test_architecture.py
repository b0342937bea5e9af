"""The shape of the package: every module imports on its own, declares its API in ``__all__`` (what other files
import from it), no module uses another's private names, the import graph among mirage's modules (imports inside
functions included) has no cycle, and every module has a stage in STAGES (which docs/architecture.md renders) whose
order its imports agree with."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mirage"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _runtime_imports(tree: ast.AST, *, type_only: bool = False):
    """Every import statement, in functions too, but not those under ``if TYPE_CHECKING:`` (never run) unless
    ``type_only``."""
    for node in ast.iter_child_nodes(tree):
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _runtime_imports(child)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node, type_only=type_only)


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """``(module, name)`` pairs an import statement of ``module`` brings in; ``name`` None for ``import x``."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    if node.level:
        base = package[: len(package) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return [(f"{source}.{alias.name}", None) if f"{source}.{alias.name}" in MODULES else (source, alias.name)
            for alias in node.names]


def _graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """mirage module → the mirage modules it imports (explicitly; a parent package run first is not counted);
    ``type_only``: imports under ``if TYPE_CHECKING:`` count too."""
    graph = {}
    for module, path in MODULES.items():
        deps = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")), type_only=type_only):
            deps |= {source for source, _name in _imported(module, node) if source in MODULES and source != module}
        graph[module] = deps
    return graph


#: Imports each module named in argv in a child forked from an interpreter that has loaded only the heavy third-party
#: libraries (no mirage module), so that each import starts from nothing of mirage, without paying torch's import
#: time once per module; prints one line per module that failed.
_IMPORT_EACH = """
import os, sys, traceback
import scipy.stats, torch, transformers  # noqa: F401  third-party only
assert not any(name == "mirage" or name.startswith("mirage.") for name in sys.modules)
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(module)
        except BaseException:
            os.write(write, traceback.format_exc().encode()[-4000:])
            os._exit(1)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        error = pipe.read().strip()
    if os.waitpid(pid, 0)[1]:
        print(f"{module}: {error.splitlines()[-1] if error else 'failed'}")
"""


def test_every_module_imports_on_its_own():
    modules = sorted(m for m in MODULES if m != "mirage.__main__")  # __main__ runs the command line
    if hasattr(os, "fork"):
        run = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *modules], capture_output=True, text=True,
                             cwd=ROOT, check=False)
        assert run.returncode == 0, run.stderr
        failures = run.stdout.splitlines()
    else:  # one fresh interpreter per module
        runs = {m: subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True, text=True, cwd=ROOT,
                                  check=False) for m in modules}
        failures = [f"{m}: {r.stderr.strip().splitlines()[-1]}" for m, r in runs.items() if r.returncode]
    assert not failures, "\n".join(failures)


def test_no_module_imports_private_names_of_another():
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}  # local name → mirage module, for ``module._name`` access
        for node in _runtime_imports(tree):
            for source, name in _imported(module, node):
                if not source.startswith("mirage"):
                    continue
                if name is None:
                    asname = next((a.asname for a in node.names if a.name == source.split(".")[-1]
                                   or a.name == source), None)
                    aliases[asname or source.split(".")[-1]] = source
                elif name.startswith("_") and not name.endswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name} from {source}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.endswith("__")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names used across modules (make them public where their concept lives):\n" + \
        "\n".join(found)


def _test_file_findings(path: Path) -> list[str]:
    """What a test file must not do: import a module of ``benchmarks/`` (scripts, run as commands), or import or use
    an underscore name of a mirage module (``from mirage.x import _y``; ``x._y`` or ``monkeypatch.setattr(x, "_y",
    …)`` on a mirage module it imported); dunders are allowed."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, aliases = [], {}  # aliases: local name (or dotted name) → mirage module

    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "benchmarks":
                    found.append(f"{node.lineno}: import {alias.name}")
                elif alias.name.split(".")[0] == "mirage":
                    aliases[alias.asname or alias.name] = alias.name
                    if alias.asname is None:  # ``import mirage.x.y`` binds ``mirage``, ``mirage.x`` … as names too
                        parts = alias.name.split(".")
                        aliases.update({".".join(parts[:k]): ".".join(parts[:k]) for k in range(1, len(parts))})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            root = node.module.split(".")[0]
            if root == "benchmarks":
                found.append(f"{node.lineno}: from {node.module} import …")
            elif root == "mirage":
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in MODULES:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif private(alias.name):
                        found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and ast.unparse(node.value) in aliases:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("setattr", "delattr", "getattr"))
              and len(node.args) >= 2):
            target, name = node.args[0], node.args[1]
            if (isinstance(name, ast.Constant) and isinstance(name.value, str) and private(name.value)
                    and ast.unparse(target) in aliases):
                found.append(f"{node.lineno}: {ast.unparse(node.func)}({ast.unparse(target)}, {name.value!r}, …)")
            if (isinstance(target, ast.Constant) and isinstance(target.value, str)
                    and target.value.split(".")[0] == "mirage" and any(map(private, target.value.split(".")))):
                found.append(f"{node.lineno}: {ast.unparse(node.func)}({target.value!r}, …)")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{where}:{line}" for line in sorted(found, key=lambda line: int(line.split(":")[0]))]


def test_tests_use_only_the_public_library():
    """Tests import no benchmark script (``benchmarks/`` runs as commands: a test that checks one runs it) and no
    private name of mirage: what a test needs is public where its concept lives, or tested through what uses it."""
    found = [line for path in sorted((ROOT / "tests").rglob("*.py")) for line in _test_file_findings(path)]
    assert not found, "tests reaching past the public library:\n" + "\n".join(found)


#: Test folders for what is not a module of the package: the docs site, the benchmark scripts and their results, the
#: repository's own rules (layering, CI policy, honest messages).
REPOSITORY_TEST_FOLDERS = ("docs", "benchmarks", "project")


def test_the_tests_are_laid_out_as_the_package():
    """A test file lies in the folder of the subpackage it tests (``tests/attribution/`` for ``mirage/attribution/``),
    in a folder of the repository's own tests, or beside conftest.py named after a top-level module it tests
    (``test_config.py``, ``test_pipeline_scores.py``): finding a module's tests needs no grep."""
    package = ROOT / "mirage"
    subpackages = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    top_level = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    misplaced = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        where = path.relative_to(ROOT / "tests").parts
        if len(where) == 1:
            name = where[0].removeprefix("test_").removesuffix(".py")
            ok = any(name == m or name.startswith(m + "_") for m in top_level)
        else:
            ok = len(where) == 2 and (where[0] in subpackages or where[0] in REPOSITORY_TEST_FOLDERS)
        if not ok:
            misplaced.append(path.relative_to(ROOT).as_posix())
    assert not misplaced, f"test files not laid out as the package: {misplaced}"


def test_the_test_check_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("import benchmarks.bench_scale\nfrom benchmarks.cci_methods import main\n"
                   "from mirage.attribution.cci import _batched_gradients, __doc__\n"
                   "import mirage.attribution.cci as cci\nfrom mirage.attribution import forward\n"
                   "import mirage.attribution.models\n"
                   "cci._native_16bit, cci.__name__, forward._run, mirage.attribution.models._x, cci.compute_cci\n"
                   "def test(monkeypatch):\n    monkeypatch.setattr(cci, '_native_16bit', None)\n"
                   "    monkeypatch.setattr('mirage.attribution.cci._x', None)\n"
                   "    monkeypatch.setattr(cci, 'ok', 1)\n",
                   encoding="utf-8")
    found = [line.split(":", 1)[1] for line in _test_file_findings(bad)]
    assert [line.split(":")[0] for line in found] == ["1", "2", "3", "7", "7", "7", "9", "10"], found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


#: Cycles closed only by type-only imports that are known and accepted (none): any cycle fails.
KNOWN_TYPE_ONLY_CYCLES: list[set[str]] = []


def test_import_graph_has_no_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_import_graph_has_no_cycle_counting_type_only_imports():
    """A type-only import is a dependency too (a module that needs another's types to be read): no cycle either."""
    graph = _graph(type_only=True)
    for known in KNOWN_TYPE_ONLY_CYCLES:
        assert _cycle({m: graph[m] & known for m in known}) is not None, f"no cycle among {sorted(known)}: remove it " \
            "from KNOWN_TYPE_ONLY_CYCLES"
        graph = {m: deps - known if m in known else deps for m, deps in graph.items()}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle (type-only imports counted): " + " -> ".join(cycle)


def test_one_reader_per_name():
    """``read_results`` (a results file as a table; ``report.read_result_objects`` gives the objects) and
    ``read_text`` (a UTF-8 file, gunzipped under a .gz name) have one definition each in the package."""
    for name in ("read_results", "read_result_objects", "read_text"):
        defined = [module for module, path in MODULES.items()
                   if any(isinstance(node, ast.FunctionDef) and node.name == name
                          for node in ast.parse(path.read_text(encoding="utf-8")).body)]
        assert len(defined) == 1, f"{name} is defined in {defined}"


#: Names every module may define for itself: command registration, entry points, exports and loggers.
SHARED_NAMES = frozenset({"register", "main", "__all__", "log", "logger"})
#: Names still defined twice whose both copies lie in modules other steps of #66 are splitting now (neither copy can
#: move until they land): ``TextView`` (the XOR-AttriQA module's, which ``runs.experiment`` may not import, and
#: ``runs.experiment``'s) and ``_located`` (the JSON readers' error position, the HTML report's text search).
KNOWN_TWICE: frozenset[str] = frozenset()


def top_level_names(tree: ast.Module) -> set[str]:
    """The names a module defines at its top level: functions, classes and plain (or annotated) assignments to a
    name; imports and tuple targets (``__getattr__, __dir__ = …``) are not definitions."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - SHARED_NAMES


def defined_twice(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Name → the modules defining it, for every top-level name defined in two modules or more."""
    where: dict[str, set[str]] = {}
    for module, path in modules.items():
        for name in top_level_names(ast.parse(path.read_text(encoding="utf-8"))):
            where.setdefault(name, set()).add(module)
    return {name: found for name, found in where.items() if len(found) > 1}


#: The redesign's bound on module length (issue #66): at most MAX_LONG modules past LONG_MODULE lines, each saying in
#: its docstring why it is one module ("Over 600 lines: …").
LONG_MODULE, MAX_LONG = 600, 3


def test_few_modules_are_long_and_each_long_one_says_why():
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    long = sorted(name for name, n in lengths.items() if n > LONG_MODULE)
    assert len(long) <= MAX_LONG, {name: lengths[name] for name in long}
    unexplained = [name for name in long
                   if f"Over {LONG_MODULE} lines:" not in (ast.get_docstring(ast.parse(MODULES[name].read_text(
                       encoding="utf-8"))) or "")]
    assert not unexplained, f"say in the docstring why each is one module ('Over {LONG_MODULE} lines: …')"


def test_each_concept_is_defined_once():
    """No top-level name is defined in two modules: the same concept is imported from its one module, and two
    concepts sharing a name are named apart (private helpers too)."""
    twice = defined_twice(MODULES)
    for name in KNOWN_TWICE:
        assert name in twice, f"{name} is defined once now: remove it from KNOWN_TWICE"
    found = {name: modules for name, modules in twice.items() if name not in KNOWN_TWICE}
    assert not found, f"{len(found)} names defined in more than one module:\n" + \
        "\n".join(f"{name}: {', '.join(sorted(modules))}" for name, modules in sorted(found.items()))


def test_the_duplicate_finder_finds_one(tmp_path):
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_text("import os\nT = 1\nlog = 2\ndef f(): pass\na, b = 1, 2\n", encoding="utf-8")
    two.write_text("T: int = 3\nclass f: pass\nlog = 4\nfrom os import path as a\n", encoding="utf-8")
    assert defined_twice({"one": one, "two": two}) == {"T": {"one", "two"}, "f": {"one", "two"}}


def test_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: mirage's modules by stage: each imports only modules of its own stage or of earlier ones. A name covers the modules
#: of its package that are not listed themselves. docs/architecture.md renders this list with each module's docstring
#: (docs/hooks.py, ``<!-- mirage:modules -->``), so the page's order is this one.
STAGES: tuple[tuple[str, ...], ...] = (
    ("attribution", "attribution.models"),
    ("attribution.forward",),
    ("attribution.planner",),
    ("attribution.graphs",),
    ("attribution.cti", "attribution.cci"),
    ("config",),
    ("attribution.tokenization",),
    ("attribution.sentences",),
    ("attribution.prompts",),
    ("attribution.generation",),
    ("attribution.token_scores",),
    ("attribution.results", "attribution.serialization"),
    ("attribution.citations",),
    ("attribution.aggregation",),
    ("likelihood",),
    ("attribution.methods",),
    ("pipeline",),
    ("runs.benchmark_options",),
    ("runs.experiment",),
    ("runs.attribute",),
    ("scoring.rows", "scoring.xor_data", "scoring.xor_attriqa"),
    ("data",),
    ("scoring", "bias"),
    ("peers",),
    ("tune",),
    ("views",),
    ("cli",),
)
#: Modules beside the stages, shared by all of them: they import only each other.
BESIDE: tuple[str, ...] = ("registry", "checks", "compat", "options", "version", "data.inputs", "data.readers", "runs",
                           "runs.store", "runs.files", "runs.sharding", "runs.lazy", "runs.progress", "views.markdown")


def _stage_of(module: str) -> int | None:
    """The stage of ``module`` (-1: beside the stages), from its own name or its nearest listed package."""
    stage = {f"mirage.{name}": k for k, names in enumerate(STAGES) for name in names}
    stage.update({f"mirage.{name}": -1 for name in BESIDE})
    while module not in stage and "." in module:
        module = module.rsplit(".", 1)[0]
    return stage.get(module)


def test_every_module_has_a_stage_and_imports_only_earlier_stages():
    """Every module is in STAGES or BESIDE (through its package), every listed name is a module, and a module imports
    only modules of its own stage or earlier ones (or, beside the stages, only each other)."""
    listed = [name for names in STAGES for name in names] + list(BESIDE)
    assert sorted(set(listed)) == sorted(listed), "a name listed twice"
    assert not [n for n in listed if f"mirage.{n}" not in MODULES], "a listed name that is no module"
    unlisted = sorted(m for m in MODULES if m not in ("mirage", "mirage.__main__") and _stage_of(m) is None)
    assert not unlisted, f"modules in no stage (add them to STAGES or BESIDE): {unlisted}"
    wrong = []
    for module, deps in _graph().items():
        own = _stage_of(module)
        for dep in deps:
            theirs = _stage_of(dep)
            if own is None or theirs is None or dep == "mirage":
                continue
            if (own == -1 and theirs != -1) or (own >= 0 and theirs > own):
                wrong.append(f"{module} (stage {own}) imports {dep} (stage {theirs})")
    assert not wrong, "imports against the order of STAGES:\n" + "\n".join(sorted(wrong))


def test_the_architecture_page_renders_the_stages():
    """The page's module table is generated (from STAGES and the docstrings), not written by hand."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "<!-- mirage:modules -->" in page


def _declared_all(tree: ast.Module) -> list[str] | None:
    """A module's ``__all__`` when it is one top-level literal list of distinct strings, else None."""
    values = [node.value for node in tree.body if isinstance(node, ast.Assign)
              and any(isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets)]
    if len(values) != 1 or not isinstance(values[0], ast.List):
        return None
    names = [e.value for e in values[0].elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return names if len(names) == len(values[0].elts) == len(set(names)) else None


def _bound_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (``if``/``try`` blocks included, so ``if TYPE_CHECKING:`` imports
    count): definitions, assignments (tuple targets too) and imports."""
    names: set[str] = set()
    for node in tree.body:
        for child in [node, *(c for c in ast.walk(node) if isinstance(node, (ast.If, ast.Try)))]:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(child.name)
            elif isinstance(child, (ast.Assign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
            elif isinstance(child, ast.ImportFrom):
                names |= {alias.asname or alias.name for alias in child.names}
            elif isinstance(child, ast.Import):
                names |= {alias.asname or alias.name.split(".")[0] for alias in child.names}
    return names


def _lazy_exports(tree: ast.Module) -> dict[str, tuple[str, int]]:
    """A package's names imported on first access (``lazy_exports(__name__, {name: submodule})``): name → (submodule,
    line)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("lazy_exports") and len(node.args) == 2
                and isinstance(node.args[1], ast.Dict)):
            return {k.value: (v.value, k.lineno) for k, v in zip(node.args[1].keys, node.args[1].values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return {}


def export_findings(modules: dict[str, Path], users: list[Path], root: Path) -> list[str]:
    """What breaks the rule that each module's ``__all__`` is its API: a module without ``__all__`` as a literal list
    of strings, an entry the module neither defines nor imports, and a name that another file imports from a module
    (``from mirage.a.b import name``, relative imports and imports in functions included; a package's lazily exported
    names count as imported from their submodule) that is neither in its ``__all__`` nor a submodule."""
    found, exported = [], {}
    trees = {module: ast.parse(path.read_text(encoding="utf-8")) for module, path in modules.items()}
    for module, path in modules.items():
        where = path.relative_to(root).as_posix()
        declared = _declared_all(trees[module])
        if declared is None:
            found.append(f"{where}: no __all__ as one literal list of distinct strings: declare its public names")
            continue
        exported[module] = set(declared)
        bound = _bound_names(trees[module]) | set(_lazy_exports(trees[module]))
        found += [f"{where}: __all__ names {name}, which it neither defines nor imports: remove it from __all__"
                  for name in declared if name not in bound]
    by_path = {path.resolve(): module for module, path in modules.items()}
    for user in users:
        tree = trees.get(by_path.get(user.resolve(), ""), None) or ast.parse(user.read_text(encoding="utf-8"))
        current = by_path.get(user.resolve())
        package = (current or "").split(".") if user.name == "__init__.py" else (current or "").split(".")[:-1]
        imports = [(node.lineno, source, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   for source in [".".join(package[: len(package) - node.level + 1] + [node.module or ""]).rstrip(".")
                                  if node.level else node.module or ""]
                   for alias in node.names]
        if current is not None:
            imports += [(line, f"{current}.{sub}", name) for name, (sub, line) in _lazy_exports(tree).items()]
        for line, source, name in imports:
            if (source in exported and source != current and name != "*" and name not in exported[source]
                    and f"{source}.{name}" not in modules):
                found.append(f"{user.relative_to(root).as_posix()}:{line}: imports {name} from {source}: add it to "
                             f"__all__ of {modules[source].relative_to(root).as_posix()}")
    return found


def test_every_module_declares_its_api_in_all():
    """Every module declares ``__all__`` (a literal list of strings, each a name it defines or imports), and every
    name another module, a test, a benchmark script or the docs' hooks imports from it is in that ``__all__``: what
    is not listed is the module's own, and may be renamed or made private without looking elsewhere."""
    users = [path for folder in ("mirage", "tests", "benchmarks") for path in sorted((ROOT / folder).rglob("*.py"))]
    found = export_findings(MODULES, [*users, ROOT / "docs" / "hooks.py"], ROOT)
    assert not found, f"{len(found)} breaks of the __all__ rule:\n" + "\n".join(found)


def test_the_export_check_finds_what_it_forbids(tmp_path):
    package = tmp_path / "mirage"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "sub" / "__init__.py").write_text(
        "from mirage.sub.a import f\n__getattr__, __dir__ = lazy_exports(__name__, {'g': 'a'})\n__all__ = ['f', 'g']\n",
        encoding="utf-8")
    (package / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from os import path\nX, Y = 1, 2\n"
        "def f(): pass\ndef g(): pass\ndef h(): pass\n__all__ = ['X', 'f', 'path', 'nothing']\n", encoding="utf-8")
    (package / "b.py").write_text("from .sub.a import Y, f\nfrom .sub import a\n__all__ = ('Y',)\n",
                                  encoding="utf-8")
    user = tmp_path / "test_user.py"
    user.write_text("def test():\n    from mirage.sub.a import X, h\n    from mirage.sub import a, f\n",
                    encoding="utf-8")
    modules = {"mirage": package / "__init__.py", "mirage.sub": package / "sub" / "__init__.py",
               "mirage.sub.a": package / "sub" / "a.py", "mirage.b": package / "b.py"}
    found = export_findings(modules, [*modules.values(), user], tmp_path)
    assert found == [
        "mirage/__init__.py: no __all__ as one literal list of distinct strings: declare its public names",
        "mirage/sub/a.py: __all__ names nothing, which it neither defines nor imports: remove it from __all__",
        "mirage/b.py: no __all__ as one literal list of distinct strings: declare its public names",
        "mirage/sub/__init__.py:2: imports g from mirage.sub.a: add it to __all__ of mirage/sub/a.py",
        "mirage/b.py:1: imports Y from mirage.sub.a: add it to __all__ of mirage/sub/a.py",
        "test_user.py:2: imports h from mirage.sub.a: add it to __all__ of mirage/sub/a.py",
    ], found
