"""The layer rules of docs/design.md, checked by parsing imports (AST, nothing is executed).

* ``airflow_delta_provider_apps.engine`` (folder ``spark_apps/engine``) outside ``engine.spark`` imports
  neither pyspark nor airflow;
* nothing under ``airflow_delta_provider_apps`` (folder ``spark_apps``) imports airflow;
* ``airflow_delta_provider`` imports no pyspark, and from the bundled apps only their documented
  protocol (``PROVIDER_MAY_IMPORT``);
* no import cycles between our modules (imports inside functions count too: a lazy import that closes
  a cycle is still a cycle in the design), nor between the engine's folders and top-level modules
  taken as units; commands reach Spark only through the data plane (``engine.plane``);
* only ``airflow_delta_provider_apps.engine.storage`` knows the filesystem: no other module (nor the
  bench) imports ``pyarrow.fs`` or touches a storage's ``filesystem``/``fs_path`` (or their private
  forms); everything else goes through the ``Storage`` methods;
* the wheel's package list (pyproject.toml) names every package folder, under its import name;
* only ``airflow_delta_provider_apps.engine.paths`` (and storage's own ``join``) builds a location from
  a table root: no other module of the apps joins a root with a non-constant part (f-string, ``+`` or
  a ``join`` call), so a path from the log reaches a reader only through the one resolver;
* tests reach the conformance corpus only through the ``conformance_root`` / ``conformance_manifest``
  fixtures, which skip without it: no test module imports its location from ``conformance_location``
  (only what ``FOR_TEST_MODULES`` names) nor spells the location itself.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# import name -> folder in the repository (pyproject.toml maps the same way)
PACKAGES = {"airflow_delta_provider_apps": "spark_apps", "airflow_delta_provider": "airflow_delta_provider"}
# The app protocol the provider may use: the operations registry, and the read-only log API and errors
# the sensor and the hook's checks read; and how the package is zipped for Spark (the bundle and the
# data source ship the same bytes). Everything else under the apps is internal to them.
PROVIDER_MAY_IMPORT = (
    "airflow_delta_provider_apps",
    "airflow_delta_provider_apps.operations",
    "airflow_delta_provider_apps.protocol",
    "airflow_delta_provider_apps.package_zip",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    parts[0] = {folder: name for name, folder in PACKAGES.items()}[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for folder in PACKAGES.values() for p in sorted((REPO / folder).rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """Absolute names imported by one module (relative imports resolved), with their line numbers."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((module, node.lineno))
            # `from pkg import submodule` imports the submodule too
            out += [(f"{module}.{alias.name}", node.lineno) for alias in node.names]
    return out


MODULES = _modules()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(rule) -> list[str]:
    found = []
    for name, path in MODULES.items():
        for imported, line in _imports(name, path):
            problem = rule(name, imported)
            if problem:
                found.append(f"{path.relative_to(REPO)}:{line}: {problem}")
    return sorted(set(found))


def test_engine_core_imports_neither_pyspark_nor_airflow():
    def rule(module: str, imported: str) -> str | None:
        if _within(module, "airflow_delta_provider_apps") and _within(imported, "airflow"):
            return f"{module} imports {imported} (the bundled apps never import Airflow)"
        in_core = _within(module, "airflow_delta_provider_apps.engine") and not _within(
            module, "airflow_delta_provider_apps.engine.spark"
        )
        if in_core and _within(imported, "pyspark"):
            return f"{module} imports {imported} (only airflow_delta_provider_apps.engine.spark may import pyspark)"
        return None

    assert _violations(rule) == []


def test_provider_imports_no_pyspark_and_only_the_app_protocol():
    def rule(module: str, imported: str) -> str | None:
        if not _within(module, "airflow_delta_provider"):
            return None
        if _within(imported, "pyspark"):
            return f"{module} imports {imported} (the provider never imports pyspark)"
        allowed = imported == "airflow_delta_provider_apps" or any(
            _within(imported, m) for m in PROVIDER_MAY_IMPORT[1:]
        )
        if _within(imported, "airflow_delta_provider_apps") and not allowed:
            return f"{module} imports {imported} (use the app protocol: {', '.join(PROVIDER_MAY_IMPORT)})"
        return None

    assert _violations(rule) == []


STORAGE_MODULE = "airflow_delta_provider_apps.engine.storage"
# storage's helper for object stores (their filesystems and the conditional create), used only by it.
OBJECT_STORES_MODULE = "airflow_delta_provider_apps.engine.object_stores"
FILESYSTEM_ATTRIBUTES = {"filesystem", "fs_path", "_fs", "_fs_path"}


def _filesystem_uses() -> list[str]:
    files = dict(MODULES)
    files.update({f"bench.{p.stem}": p for p in sorted((REPO / "bench").rglob("*.py"))})
    found = []
    for name, path in files.items():
        if name in (STORAGE_MODULE, OBJECT_STORES_MODULE):
            continue
        where = path.relative_to(REPO)
        for imported, line in _imports(name, path):
            if imported == OBJECT_STORES_MODULE or imported.startswith(OBJECT_STORES_MODULE + "."):
                found.append(f"{where}:{line}: imports {imported} (only {STORAGE_MODULE} uses it)")
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in FILESYSTEM_ATTRIBUTES:
                found.append(f"{where}:{node.lineno}: uses .{node.attr} (only {STORAGE_MODULE} knows the filesystem)")
        for imported, line in _imports(name, path):
            if _within(imported, "pyarrow.fs"):
                found.append(f"{where}:{line}: imports {imported} (only {STORAGE_MODULE} knows the filesystem)")
    return sorted(set(found))


def test_only_storage_knows_the_filesystem():
    assert _filesystem_uses() == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(storage, p):\n    return storage.filesystem.open_input_file(storage.fs_path(p))\n",
        "from pyarrow import fs\n",
        "import pyarrow.fs as pafs\n",
    ],
)
def test_a_planted_filesystem_use_is_found(monkeypatch, source):
    _plant(monkeypatch, source)
    assert any("spark_apps/engine/planted.py" in v for v in _filesystem_uses())


def _plant(monkeypatch, source: str) -> None:
    """A module ``engine/planted.py`` holding ``source``, seen by the rules (nothing is written)."""
    planted = REPO / "spark_apps" / "engine" / "planted.py"
    monkeypatch.setitem(MODULES, "airflow_delta_provider_apps.engine.planted", planted)
    monkeypatch.setattr(Path, "read_text", _reading(planted, source))


PATHS_MODULES = {"airflow_delta_provider_apps.engine.paths", STORAGE_MODULE}
_ROOT_NAMES = ("root", "table_uri")


def _is_root(node: ast.AST) -> bool:
    """An expression naming a table root (``root``, ``table_root``, ``snapshot.table_root``, ``spec.table_uri``)."""
    last = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return last.lower().endswith(_ROOT_NAMES)


def _is_constant(node: ast.AST) -> bool:
    """A literal or an ALL_CAPS module constant (``LOG_DIR_NAME``): fixed names, never a path from the log."""
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id.isupper())


def _root_joins(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for i, part in enumerate(parts[:-1]):
                if isinstance(part, ast.FormattedValue) and _is_root(part.value):
                    rest = parts[i + 1 :]
                    if isinstance(rest[0], ast.Constant) and str(rest[0].value).startswith("/") and len(rest) > 1:
                        lines.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if _is_root(node.left) and not _is_constant(node.right):
                lines.append(node.lineno)
            elif isinstance(node.left, ast.BinOp) and _is_root(node.left.left) and not _is_constant(node.right):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join":
            if node.args and _is_root(node.args[0]) and not all(_is_constant(a) for a in node.args[1:]):
                lines.append(node.lineno)
    return lines


def _hand_joined_paths() -> list[str]:
    found = []
    for name, path in MODULES.items():
        if not _within(name, "airflow_delta_provider_apps") or name in PATHS_MODULES:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(REPO)
        found += [f"{where}:{line}: joins a table root by hand (use engine.paths)" for line in _root_joins(tree)]
    return sorted(set(found))


SESSION_MODULE = "airflow_delta_provider_apps.engine.spark.session"


def _executor_entry_points() -> list[str]:
    """Calls of ``mapInArrow`` outside the session module, whose ``map_in_arrow`` hands executors the
    object-store settings: a job started elsewhere would run without them."""
    found = []
    for name, path in MODULES.items():
        if name == SESSION_MODULE or not _within(name, "airflow_delta_provider_apps"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("mapInArrow", "mapInPandas"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: calls .{node.attr} (use session.map_in_arrow)")
    return found


def test_executor_code_starts_only_through_map_in_arrow():
    assert _executor_entry_points() == []


def test_a_planted_map_in_arrow_is_found(monkeypatch):
    _plant(monkeypatch, "def f(df, fn):\n    return df.mapInArrow(fn, 'x long')\n")
    assert any("spark_apps/engine/planted.py" in v for v in _executor_entry_points())


def test_only_paths_joins_a_table_root_with_a_path():
    assert _hand_joined_paths() == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(root, files):\n    return [f'{root}/{p}' for p in files]\n",
        "def f(snapshot, p):\n    return snapshot.table_root + '/' + p\n",
        "def f(storage, snapshot, p):\n    return storage.join(snapshot.table_root, p)\n",
        "import os\ndef f(table_root, p):\n    return os.path.join(table_root, 'x', p)\n",
    ],
)
def test_a_planted_root_join_is_found(monkeypatch, source):
    _plant(monkeypatch, source)
    assert any("spark_apps/engine/planted.py" in v for v in _hand_joined_paths())


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges = set()
        for imported, _ in _imports(name, path):
            # an import of a.b.c depends on the deepest of our modules it names
            target = imported
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            # a package's __init__ importing its own submodules is how packages export names
            if target and target != name and not (path.name == "__init__.py" and _within(target, name)):
                edges.add(target)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


ENGINE = "airflow_delta_provider_apps.engine"


def _folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto the engine's units: each folder (``commands``, ``spark``,
    ``log``...) and each top-level module (``config``, ``table``...) of the engine is one node."""

    def unit(module: str) -> str | None:
        rest = module[len(ENGINE) + 1 :] if _within(module, ENGINE) and module != ENGINE else None
        return rest.split(".")[0] if rest else None

    folded: dict[str, set[str]] = {}
    for module, imported in graph.items():
        u = unit(module)
        if u is None:
            continue
        folded.setdefault(u, set())
        for other in imported:
            v = unit(other)
            if v is not None and v != u:
                folded[u].add(v)
                folded.setdefault(v, set())
    return folded


def test_no_import_loops_between_the_engines_folders():
    """Layers, not only modules, form no loop: e.g. commands use the data plane's interface
    (``engine.plane``) and never ``engine.spark``, which never imports commands or the table."""
    assert _cycles(_folder_graph(_graph())) == []


def test_a_planted_folder_loop_is_found():
    graph = _graph()
    planted = f"{ENGINE}.spark.merge"
    graph[planted] = graph[planted] | {f"{ENGINE}.table"}  # the Spark plane using the table's API
    assert ["spark", "table"] in _cycles(_folder_graph(graph))


def test_commands_reach_spark_only_through_the_plane():
    def rule(module: str, imported: str) -> str | None:
        if _within(module, f"{ENGINE}.commands") and _within(imported, f"{ENGINE}.spark"):
            return f"{module} imports {imported} (commands receive a data plane: {ENGINE}.plane)"
        return None

    assert _violations(rule) == []


def _transaction_reach_ins() -> list[str]:
    found = []
    for name, path in MODULES.items():
        if not _within(name, f"{ENGINE}.commands") or name == f"{ENGINE}.commands.base":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "txn":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: .txn (go through the Command skeleton)")
    return found


def test_commands_change_the_commit_only_through_the_skeleton():
    """The transaction is the skeleton's (commands/base.py): the commands set parameters, metadata and
    protocol through its methods, so every command goes through the one pipeline."""
    assert _transaction_reach_ins() == []


def test_a_planted_transaction_reach_in_is_found(monkeypatch):
    planted = REPO / "spark_apps" / "engine" / "commands" / "planted.py"
    monkeypatch.setitem(MODULES, f"{ENGINE}.commands.planted", planted)
    monkeypatch.setattr(Path, "read_text", _reading(planted, "def f(cmd):\n    cmd.txn.update_metadata(None)\n"))
    assert any("planted.py:2" in f for f in _transaction_reach_ins())


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import pyspark.sql\n", "only airflow_delta_provider_apps.engine.spark may import pyspark"),
        (
            "def f():\n    from pyspark.sql import functions\n",
            "only airflow_delta_provider_apps.engine.spark may import pyspark",
        ),
        ("from airflow.models import BaseOperator\n", "never import Airflow"),
    ],
)
def test_a_planted_import_is_found(tmp_path, monkeypatch, source, expected):
    # The rules above would pass vacuously if the walk missed files: plant a module and see it fail.
    planted = REPO / "spark_apps" / "engine" / "log" / "planted.py"
    monkeypatch.setitem(MODULES, "airflow_delta_provider_apps.engine.log.planted", planted)
    monkeypatch.setattr(Path, "read_text", _reading(planted, source))
    with pytest.raises(AssertionError, match=expected):
        test_engine_core_imports_neither_pyspark_nor_airflow()


def test_a_planted_cycle_is_found():
    graph = _graph()
    graph["airflow_delta_provider_apps.engine.errors"] = graph["airflow_delta_provider_apps.engine.errors"] | {
        "airflow_delta_provider_apps.engine.table"
    }
    assert any("airflow_delta_provider_apps.engine.errors" in c for c in _cycles(graph))


def _reading(planted: Path, source: str):
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        return source if self == planted else real(self, *args, **kwargs)

    return read_text


def test_the_wheel_ships_every_package_under_its_import_name():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {name: folder for name, folder in PACKAGES.items() if name != folder}
    on_disk = {_module_name(p.parent / "__init__.py") for p in MODULES.values() if p.name == "__init__.py"}
    assert set(config["packages"]) == on_disk


# ---- the conformance corpus only through the fixtures that skip without it ------------------------

TESTS = REPO / "tests"
LOCATION_MODULE = "conformance_location"
# the fixtures, the location itself, and this check (its planted examples)
LOCATION_OWNERS = {TESTS / "conftest.py", TESTS / f"{LOCATION_MODULE}.py", Path(__file__).resolve()}


def _for_test_modules() -> frozenset[str]:
    tree = ast.parse((TESTS / f"{LOCATION_MODULE}.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "FOR_TEST_MODULES")
    return frozenset(ast.literal_eval(node.value.args[0]))


def _corpus_reads(source: str, where: str) -> list[str]:
    """Where ``source`` reaches the corpus without the skipping fixtures."""
    allowed, found = _for_test_modules(), []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == LOCATION_MODULE for a in node.names):
            found.append(f"{where}:{node.lineno}: imports {LOCATION_MODULE} (use the conformance_root fixture)")
        elif isinstance(node, ast.ImportFrom) and node.module == LOCATION_MODULE:
            for name in sorted({a.name for a in node.names} - allowed):
                found.append(f"{where}:{node.lineno}: imports {name} (use the conformance_root fixture)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" not in node.value:
            if "DELTA_CONFORMANCE_DIR" in node.value or "shared/conformance" in node.value:
                found.append(f"{where}:{node.lineno}: spells the corpus location (use the conformance_root fixture)")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if isinstance(node.right, ast.Constant) and node.right.value == "conformance":
                found.append(f"{where}:{node.lineno}: builds the corpus location (use the conformance_root fixture)")
    return found


def _direct_corpus_reads() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path not in LOCATION_OWNERS:
            found += _corpus_reads(path.read_text(), str(path.relative_to(REPO)))
    return found


def test_tests_reach_the_conformance_corpus_only_through_the_skipping_fixtures():
    assert _direct_corpus_reads() == []


@pytest.mark.parametrize(
    "source",
    [
        "from conformance_location import CONFORMANCE\nroot = CONFORMANCE / 'dat'\n",
        "from conformance_location import HOW_TO_GET_IT, find_conformance_dir\n",
        "import conformance_location\n",
        "import os\nroot = os.environ['DELTA_CONFORMANCE_DIR']\n",
        "from pathlib import Path\nroot = Path(__file__).parents[2] / 'shared' / 'conformance'\n",
        "root = '../shared/conformance/dat'\n",
    ],
)
def test_a_planted_corpus_read_is_found(source):
    assert _corpus_reads(source, "tests/planted.py")
    assert _corpus_reads("from conformance_location import manifest_tables\n", "tests/planted.py") == []


# -- transports (issue 43 item 2) ---------------------------------------------------------------
# The transport registry and its implementations: the only modules that know which way a task
# reaches Spark. Everything else (the hook, the operators, the triggers, the sensors) goes through
# the Transport contract, so a new transport is one module and one registry line.
TRANSPORT_MODULES = {
    f"airflow_delta_provider.hooks.{m}"
    for m in ("transport", "registry", "connections", "submit", "driver", "connect", "local")
}
# the transports' names and the connection types that select them; "local" too: only the user's
# ``execution`` argument may be compared with it (``execution="local"`` is the operator's choice to run
# in the worker, made before any transport is asked; the registry then names that transport)
TRANSPORT_KINDS = {"spark-submit", "connect", "local", "spark", "delta_spark", "spark_connect", "sc://"}
TRANSPORT_KIND_NAMES = {"CONNECT_CONN_TYPE", "DELTA_SPARK_CONN_TYPE"}


def _named(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _kind_branches(source: str, where: str) -> list[str]:
    """Where ``source`` asks which transport it has: a comparison with a transport's name or a Spark
    connection type (``== "spark_connect"``, ``in ("spark", "delta_spark")``, ``.startswith("sc://")``),
    ``is_connect(...)``, ``isinstance(x, SomeTransport)`` or the driver of one transport, one
    transport built by its class name (``LocalTransport(hook)``: the registry picks), and the hook's
    hard-wired ``submitter``. Comparing the user's ``execution`` argument is no branch on the kind."""
    found = []

    def kind_constant(node: ast.AST) -> bool:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(
            (isinstance(n, ast.Constant) and n.value in TRANSPORT_KINDS) or _named(n) in TRANSPORT_KIND_NAMES
            for n in items
        )

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(kind_constant(n) for n in (node.left, *node.comparators)):
            if not any(_named(n) == "execution" for n in (node.left, *node.comparators)):
                found.append(f"{where}:{node.lineno}: compares with a transport kind")
        elif isinstance(node, ast.Call) and _named(node.func) == "startswith" and any(map(kind_constant, node.args)):
            found.append(f"{where}:{node.lineno}: tests a transport's URL scheme")
        elif isinstance(node, ast.Call) and _named(node.func) == "is_connect":
            found.append(f"{where}:{node.lineno}: asks whether the connection is Spark Connect")
        elif (
            isinstance(node, ast.Call)
            and _named(node.func) == "isinstance"
            and len(node.args) == 2
            and any(
                _named(n).endswith("Transport") or _named(n) == "SubmittedDriver"
                for n in (node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]])
            )
        ):
            found.append(f"{where}:{node.lineno}: tests which transport it has")
        elif (
            isinstance(node, ast.Call) and _named(node.func).endswith("Transport") and _named(node.func) != "Transport"
        ):
            found.append(f"{where}:{node.lineno}: builds one transport by name (the registry picks)")
        elif isinstance(node, ast.Attribute) and node.attr == "submitter":
            found.append(f"{where}:{node.lineno}: uses the spark-submit transport by name")
    return found


def _transport_kind_branches() -> list[str]:
    found = []
    for name, path in MODULES.items():
        if _within(name, "airflow_delta_provider") and name not in TRANSPORT_MODULES:
            found += _kind_branches(path.read_text(), str(path.relative_to(REPO)))
    return found


def test_no_module_outside_the_transport_registry_branches_on_the_transport_kind():
    assert _transport_kind_branches() == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(conn):\n    return conn.conn_type == 'spark_connect'\n",
        "def f(conn):\n    return conn.conn_type in ('spark', 'delta_spark')\n",
        "def f(hook):\n    return hook.transport.name != 'spark-submit'\n",
        "def f(master):\n    return master.startswith('sc://')\n",
        "def f(conn):\n    return is_connect(conn)\n",
        "def f(t):\n    return isinstance(t, ConnectTransport)\n",
        "def f(r):\n    return isinstance(r, (dict, SubmittedDriver))\n",
        "def f(hook):\n    return hook.submitter.start()\n",
        "def f(conn):\n    return conn.conn_type == CONNECT_CONN_TYPE\n",
        "def f(result):\n    return result.get('transport') != 'local'\n",
        "def f(hook):\n    return hook.transport.name in ('local', 'connect')\n",
        "def f(hook):\n    return LocalTransport(hook).run('checkpoint', '/t', {})\n",
    ],
)
def test_a_planted_kind_branch_is_found(source):
    assert _kind_branches(source, "planted.py")
    for choice in ("op.execution in ('auto', 'local')", "execution == 'local'", "transport_in_worker()(hook)"):
        assert _kind_branches(f"def f(op, execution, hook):\n    return {choice}\n", "planted.py") == []


MERGE = f"{ENGINE}.merge"


def _merge_surface_violations() -> list[str]:
    """Imports of MERGE's package from outside it that pass its surface: a submodule
    (``engine.merge.plan``) or a private name (``_x``). ``engine.merge``'s ``__init__`` exports the
    package's public names (its ``__all__``)."""
    found = []
    for name, path in MODULES.items():
        if _within(name, MERGE):
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                pairs = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                pairs = [(module, alias.name) for alias in node.names]
            else:
                continue
            for module, imported in pairs:
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                if module == ENGINE and imported == "merge":
                    continue
                if _within(module, MERGE) and module != MERGE:
                    found.append(f"{where}: imports {module} (import from {MERGE} itself)")
                elif module == MERGE and imported is not None and imported.startswith("_"):
                    found.append(f"{where}: imports {MERGE}.{imported} (a private name)")
    return found


def test_merge_is_reached_only_through_its_package_surface():
    """MERGE's package (plan, source, by_file, by_join) is one unit from outside: modules import its
    public names from ``engine.merge``, never a submodule or a private name, so its insides can change."""
    assert _merge_surface_violations() == []


def test_merge_exports_only_public_names_that_exist():
    import importlib

    merge = importlib.import_module(MERGE)
    assert merge.__all__ and not [n for n in merge.__all__ if n.startswith("_")]
    assert [n for n in merge.__all__ if not hasattr(merge, n)] == []


@pytest.mark.parametrize(
    "source, line",
    [
        ("from ..merge.plan import bind_plan\n", "planted.py:1"),
        ("def f():\n    from ..merge import _covers\n", "planted.py:2"),
        ("import airflow_delta_provider_apps.engine.merge.by_file\n", "planted.py:1"),
    ],
)
def test_a_planted_merge_reach_in_is_found(monkeypatch, source, line):
    planted = REPO / "spark_apps" / "engine" / "commands" / "planted.py"
    monkeypatch.setitem(MODULES, f"{ENGINE}.commands.planted", planted)
    monkeypatch.setattr(Path, "read_text", _reading(planted, source))
    assert any(line in f for f in _merge_surface_violations())


# ------------------------------------------------------------------------------ private names
TESTS = REPO / "tests"


def _test_modules() -> dict[str, Path]:
    """The test modules and their helpers, by the name they import each other under (tests/ and its
    folders are on sys.path: ``import merge_reference``)."""
    return {p.stem: p for p in sorted(TESTS.rglob("*.py")) if p.name != "__init__.py"}


def _private_name_violations() -> list[str]:
    """Every import of a private name of another of our modules (``from x import _name``), and every
    use of one through an imported module (``x._name``). A module alias (``from pyspark.sql import
    datasource as _ds``) imports a public name and is fine; so are dunders."""
    ours = dict(MODULES)
    helpers = _test_modules()
    found = []
    for name, path in {**ours, **{f"tests:{k}": v for k, v in helpers.items()}}.items():
        if name.startswith("tests:"):
            package = ""
        else:
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> one of our modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                if module not in ours and module not in helpers:
                    continue
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    if full in ours:  # a submodule
                        aliases[alias.asname or alias.name] = full
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in ours or alias.name in helpers:
                        aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: uses {aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_no_module_uses_another_modules_private_names():
    """A name starting with ``_`` is its module's own (issue 43): a helper another module needs is
    public, or lives in the one module that uses it. Tests count too."""
    assert _private_name_violations() == []


@pytest.mark.parametrize(
    "source, found",
    [
        ("from ..storage import _helper\n", True),
        ("def f():\n    from .. import storage\n    return storage._helper()\n", True),
        ("from pyspark.sql import datasource as _ds\n", False),  # a module alias: a public name
        ("from ..storage import storage_for as _storage_for\n", False),  # a public name, privately named
    ],
)
def test_a_planted_private_import_is_found(monkeypatch, source, found):
    planted = REPO / "spark_apps" / "engine" / "commands" / "planted.py"
    monkeypatch.setitem(MODULES, f"{ENGINE}.commands.planted", planted)
    monkeypatch.setattr(Path, "read_text", _reading(planted, source))
    assert any("planted.py" in v for v in _private_name_violations()) is found


def _static_all(path: Path) -> list[str]:
    """A module's ``__all__`` as its source states it (a literal list or tuple; nothing imported)."""
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def test_merge_exports_its_submodules_public_names():
    """MERGE's surface is its submodules' ``__all__``, each name stated once, in the module that
    defines it. The package looks a name up in its submodules in turn on first use: it names every
    submodule, each after the ones it imports (so the clause rules, first, load without pyarrow), and
    no name is in two ``__all__`` (read from the sources)."""
    import importlib

    merge = importlib.import_module(MERGE)
    order = list(merge._SUBMODULES)
    folder = REPO / "spark_apps" / "engine" / "merge"
    assert sorted(order) == sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
    depth = len(MERGE.split("."))
    for i, module in enumerate(order):
        imported = _imports(f"{MERGE}.{module}", folder / f"{module}.py")
        within = {m.split(".")[depth] for m, _ in imported if _within(m, MERGE) and m != MERGE}
        assert within <= set(order[:i]), module
    names = [n for m in order for n in _static_all(folder / f"{m}.py")]
    assert len(names) == len(set(names))  # each name from one module
    assert merge.__all__ == sorted(names)


# ------------------------------------------------------------------------------ import fallbacks
# The optional dependencies a module may try to import, (module, what it imports) -> why a missing
# one is fine there. Any other ``except ImportError`` / ``except ModuleNotFoundError`` (alone or in a
# tuple) hides a broken import behind a silent fallback (issue 43): import normally instead.
OPTIONAL_IMPORTS = {
    ("airflow_delta_provider_apps.__main__", "airflow_delta_provider_apps.cli"): (
        "spark-submit runs the file by path from a source tree: the package's parent folder is put on "
        "sys.path and the same import is made again (a missing package still fails there)"
    ),
    ("airflow_delta_provider_apps.datasource_streaming", "pyspark.sql.streaming.datasource"): (
        "Trigger.AvailableNow and read limits exist from pyspark 4.2; on 4.0/4.1 the stream runs without them"
    ),
    ("airflow_delta_provider_apps.engine.catalog.glue", "boto3"): (
        "the [glue] extra: without it the Glue catalog is refused with an error naming the extra"
    ),
    ("airflow_delta_provider.exceptions", "airflow.sdk.exceptions"): (
        "Airflow 3.1's task SDK does not re-export them: the same classes from airflow.exceptions"
    ),
    ("airflow_delta_provider.operators.delta", "airflow.sdk.configuration"): (
        "Airflow 3.1: the same configuration from airflow.configuration"
    ),
    ("airflow_delta_provider.storage_connections", "airflow.providers.amazon"): (
        "the Amazon provider is optional: without it the connection's login and password are the keys"
    ),
    ("airflow_delta_provider.storage_connections", "airflow.sdk.log"): (
        "mask_secret; the module says Airflow 3.1+ (the minimum supported) has it, so this fallback, which "
        "masks nothing, looks dead (not verified against 3.1.0: a candidate for removal)"
    ),
    ("airflow_delta_provider.hooks.driver", "airflow.providers.cncf.kubernetes"): (
        "the Kubernetes provider is optional: following a driver pod without it fails with an error naming it"
    ),
    ("airflow_delta_provider.lineage", "airflow.providers.openlineage"): (
        "the [openlineage] extra: without it a run reports no lineage"
    ),
    ("airflow_delta_provider.lineage", "openlineage.client"): "the [openlineage] extra, as above",
}
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _catches_import_errors(handler: ast.excepthandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(_named(c) in IMPORT_ERRORS for c in caught if c is not None)


def _import_fallbacks() -> tuple[list[str], set[tuple[str, str]]]:
    """Every ``try`` that catches an import error where it imports something not in
    ``OPTIONAL_IMPORTS`` (or imports nothing), and the allowlist's entries in use."""
    found, used = [], set()
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Try) or not any(map(_catches_import_errors, node.handlers)):
                continue
            imported = []
            for stmt in node.body:
                for inner in ast.walk(stmt):
                    if isinstance(inner, ast.Import):
                        imported += [alias.name for alias in inner.names]
                    elif isinstance(inner, ast.ImportFrom):
                        base = package.split(".")[: len(package.split(".")) - inner.level + 1] if inner.level else []
                        imported.append(".".join(base + ([inner.module] if inner.module else [])))
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            allowed = [next((k for k in OPTIONAL_IMPORTS if k[0] == name and _within(m, k[1])), None) for m in imported]
            used |= {k for k in allowed if k}
            if not imported or None in allowed:
                what = ", ".join(m for m, k in zip(imported, allowed) if k is None) or "nothing"
                found.append(f"{where}: catches an import error of {what} (import it; see OPTIONAL_IMPORTS)")
    return sorted(found), used


def test_no_silent_import_fallbacks():
    """An ``except ImportError`` only around an optional dependency named in ``OPTIONAL_IMPORTS``
    with its reason, and every entry there still in use."""
    found, used = _import_fallbacks()
    assert found == []
    assert set(OPTIONAL_IMPORTS) - used == set()


@pytest.mark.parametrize(
    "source",
    [
        "def f(t):\n    try:\n        from ..log.file_actions import dv_unique_ids\n"
        "    except (ImportError, KeyError):\n        return None\n",
        "try:\n    import numpy\nexcept ModuleNotFoundError:\n    numpy = None\n",
        "try:\n    import boto3\nexcept ImportError:\n    pass\n",  # optional for the Glue catalog only
        "try:\n    x = 1\nexcept ImportError:\n    pass\n",
    ],
)
def test_a_planted_import_fallback_is_found(monkeypatch, source):
    _plant(monkeypatch, source)
    assert any("spark_apps/engine/planted.py" in v for v in _import_fallbacks()[0])
