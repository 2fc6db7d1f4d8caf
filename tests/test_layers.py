"""The import rules between mqgate's layers (docs/design.md).

Every module under ``mqgate/`` is parsed with ``ast`` (never imported), and every
``import`` statement in it is checked, including the ones inside functions and
``if TYPE_CHECKING:`` blocks: a lazy import of the reactor in an engine is still the
reactor in an engine. The rules, by the first component below ``mqgate``:

- engines (``amqp``, ``stomp``, ``portmap``, ``tunnel``, ``sniff``) and ``config``:
  the standard library, attrs, their own package and ``mqgate.errors``; no Twisted.
- ``core`` and ``egress``: the standard library, zope.interface, ``twisted.logger``,
  ``twisted.internet.defer``, ``twisted.python.failure``, attrs, ``mqgate.errors``,
  ``mqgate.core``, ``mqgate.egress``, ``mqgate.amqp.message`` and
  ``mqgate.amqp.codec``; never the reactor or any other ``twisted.internet`` module.
- engines, ``core`` and ``egress`` do no I/O (design rule 1): no
  ``socket``, ``time``, ``select``, ``threading``, ``os`` and the like, and no call of
  the builtin ``open()``.

Each rule is one test that lists every offence as ``path:line: what``. The rules hold
trivially for an empty package, so this file runs from the first commit on; the
checker itself is tested on small sources below so that the rule tests can fail.
"""

import ast
import functools
import sys
from pathlib import Path

import attr

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO_ROOT / "mqgate"

#: Sans-IO engines: bytes in, events out (docs/design.md).
ENGINE_LAYERS = ("amqp", "stomp", "portmap", "tunnel", "sniff")
#: Properties to typed settings: pure, but it may read its file (docs/design.md).
CONFIG_LAYERS = ("config",)
#: The broker core and the egress scheduler: no I/O, clock injected.
CORE_LAYERS = ("core", "egress")

#: Third-party names every pure layer may use.
ATTRS = ("attr", "attrs")

#: What core and egress may import besides the standard library.
CORE_ALLOWED = ATTRS + (
    "zope.interface",
    "twisted.logger",
    "twisted.internet.defer",
    "twisted.python.failure",
    "mqgate.errors",
    "mqgate.core",
    "mqgate.egress",
    "mqgate.amqp.message",
    "mqgate.amqp.codec",
)

#: Standard-library modules that reach the outside world: sockets, the clock,
#: threads, processes, files. ``io.open`` is ``open`` under another name.
IO_MODULES = (
    "socket", "ssl", "select", "selectors", "asyncio", "threading", "_thread",
    "multiprocessing", "subprocess", "concurrent", "time", "os", "shutil",
    "tempfile", "io.open",
)


@attr.s(frozen=True)
class Import:
    """One name an import statement brings in.

    @ivar names: the dotted names the statement may refer to. ``import a.b`` gives
        ``("a.b",)``; ``from a import b`` gives ``("a", "a.b")`` because ``b`` may
        be a module or an attribute of ``a``.
    @ivar line: the statement's line number.
    """

    names = attr.ib()
    line = attr.ib()

    @property
    def shown(self):
        """The most specific name, for messages."""
        return self.names[-1]


@attr.s(frozen=True)
class Module:
    """A parsed module of the mqgate package."""

    name = attr.ib()        # dotted, e.g. "mqgate.amqp.codec"
    path = attr.ib()        # relative to the repository root, for messages
    tree = attr.ib()
    is_package = attr.ib()  # an __init__.py

    @property
    def layer(self):
        """The first component below ``mqgate`` (``None`` for mqgate/__init__.py)."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else None


def parse_module(name, source, path="<string>", is_package=False):
    """Parse C{source} as module C{name}; a syntax error fails with the path."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise AssertionError(f"{path}: cannot parse: {e}") from e
    return Module(name=name, path=str(path), tree=tree, is_package=is_package)


def iter_modules(package_dir=PACKAGE_DIR):
    """Every ``.py`` file under C{package_dir}, parsed, in a stable order."""
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir.parent)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        yield parse_module(".".join(parts), path.read_text(encoding="utf-8"),
                           path=rel, is_package=is_package)


def _resolve_relative(module, level, target):
    """The absolute name of ``from <level dots><target> import ...`` in C{module}."""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module):
    """Every import in C{module}, at any depth, as L{Import} values."""
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found.extend(Import((alias.name,), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, node.level, node.module)
            else:
                base = node.module
            for alias in node.names:
                if alias.name == "*":
                    found.append(Import((base,), node.lineno))
                else:
                    found.append(Import((base, f"{base}.{alias.name}"), node.lineno))
    return sorted(found, key=lambda imp: imp.line)


def open_calls(module):
    """Line numbers of every call of a bare name ``open(...)`` in C{module}."""
    return sorted(
        node.lineno for node in ast.walk(module.tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name) and node.func.id == "open")


def _within(name, prefixes):
    """Whether dotted C{name} is one of C{prefixes} or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def is_stdlib(name):
    """Whether the top-level package of dotted C{name} is in the standard library."""
    return name.split(".")[0] in sys.stdlib_module_names


def _pure_allowed(module):
    """What an engine or config module may import besides the standard library."""
    return ATTRS + (f"mqgate.{module.layer}", "mqgate.errors")


def _any_allowed(imp, allowed):
    """An import is allowed if any name it may refer to is allowed."""
    return any(_within(name, allowed) or is_stdlib(name) for name in imp.names)


def import_violations(modules, layers, allowed_for, rule):
    """``path:line: imports X (rule)`` for each import outside C{allowed_for(m)}."""
    return [
        f"{m.path}:{imp.line}: {m.name} imports {imp.shown} ({rule})"
        for m in modules if m.layer in layers
        for imp in imports_of(m)
        if not _any_allowed(imp, allowed_for(m))
    ]


def io_violations(modules, layers):
    """``path:line: ...`` for each I/O module import or ``open()`` call in C{layers}."""
    found = []
    for m in modules:
        if m.layer not in layers:
            continue
        for imp in imports_of(m):
            bad = [n for n in imp.names if _within(n, IO_MODULES)]
            if bad:
                found.append(f"{m.path}:{imp.line}: {m.name} imports {bad[-1]} "
                             "(no sockets, clock, threads or files below net/)")
        found.extend(f"{m.path}:{line}: {m.name} calls open() "
                     "(file I/O belongs to an adapter or the store)"
                     for line in open_calls(m))
    return found


def _report(violations):
    return "layer rule broken (docs/design.md):\n" + "\n".join(violations)


# --- the rules -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def package_modules():
    """The mqgate package, parsed once for all the rules below: parsing every module
    takes about a second, and the rules only read the trees."""
    return tuple(iter_modules())


def test_engines_import_only_stdlib_attrs_and_themselves():
    """Engines import only the stdlib, attrs, their own package and mqgate.errors."""
    found = import_violations(
        package_modules(), ENGINE_LAYERS, _pure_allowed,
        "engines: stdlib, attrs, own package, mqgate.errors")
    assert not found, _report(found)


def test_config_imports_only_stdlib_attrs_and_itself():
    """mqgate.config imports only the stdlib, attrs, itself and mqgate.errors."""
    found = import_violations(
        package_modules(), CONFIG_LAYERS, _pure_allowed,
        "config: stdlib, attrs, own package, mqgate.errors")
    assert not found, _report(found)


def test_core_and_egress_import_only_their_allowed_list():
    """core and egress import only the stdlib and their allow-list: never the reactor."""
    found = import_violations(
        package_modules(), CORE_LAYERS, lambda m: CORE_ALLOWED,
        "core/egress: stdlib, zope.interface, twisted.logger, twisted.internet.defer, "
        "twisted.python.failure, attrs, mqgate.{errors,core,egress,amqp.message,"
        "amqp.codec}")
    assert not found, _report(found)


def test_engines_core_and_egress_do_no_io():
    """Engines, core and egress import no socket/clock/thread/file module, call no open()."""
    found = io_violations(package_modules(), ENGINE_LAYERS + CORE_LAYERS)
    assert not found, _report(found)


def test_repository_twisted_dir_does_not_shadow_twisted():
    """twisted/ and twisted/plugins/ hold no __init__.py (docs/design.md, Known pitfalls)."""
    shadows = [str(p.relative_to(REPO_ROOT)) for p in (
        REPO_ROOT / "twisted" / "__init__.py",
        REPO_ROOT / "twisted" / "plugins" / "__init__.py") if p.exists()]
    assert not shadows, (
        f"{shadows} make the checkout's twisted/ a package that shadows the real "
        "Twisted; only twisted/plugins/mqgate_plugin.py belongs there")


# --- the checker, on small sources (so that the rules above can fail) ------------

def _module(source, name="mqgate.core.thing", is_package=False):
    return parse_module(name, source, path=name.replace(".", "/") + ".py",
                        is_package=is_package)


def test_checker_finds_reactor_imported_inside_a_function():
    """An import of the reactor inside a core function is reported with module and line."""
    m = _module("def f():\n    from twisted.internet import reactor\n")
    found = import_violations([m], CORE_LAYERS, lambda _: CORE_ALLOWED, "rule")
    assert found == [
        "mqgate/core/thing.py:2: mqgate.core.thing imports "
        "twisted.internet.reactor (rule)"]


def test_checker_allows_core_allow_list():
    """core may use defer, logger, zope.interface, attrs and the pure amqp modules."""
    m = _module(
        "from twisted.internet import defer\n"
        "from twisted.internet.defer import Deferred\n"
        "from twisted import logger\n"
        "from zope.interface import implementer\n"
        "import attr\nimport collections, heapq\n"
        "from mqgate.amqp import codec\n"
        "from mqgate.amqp.message import EncodedMessage\n"
        "from . import router\nfrom ..errors import ConfigError\n")
    assert import_violations([m], CORE_LAYERS, lambda _: CORE_ALLOWED, "rule") == []


def test_checker_rejects_other_twisted_internet_and_engine_modules_in_core():
    """core may not import twisted.internet.task, the interfaces module or amqp.link."""
    m = _module("from twisted.internet import task, interfaces\n"
                "from mqgate.amqp.link import Link\n")
    found = import_violations([m], CORE_LAYERS, lambda _: CORE_ALLOWED, "rule")
    assert [f.split(" imports ")[1] for f in found] == [
        "twisted.internet.task (rule)", "twisted.internet.interfaces (rule)",
        "mqgate.amqp.link.Link (rule)"]


def test_checker_resolves_relative_imports_against_the_package():
    """``from ..net import x`` in mqgate/amqp/__init__.py resolves to mqgate.net."""
    m = _module("from ..net import amqp\nfrom . import codec\n",
                name="mqgate.amqp", is_package=True)
    found = import_violations([m], ENGINE_LAYERS, _pure_allowed, "rule")
    assert [f.split(" imports ")[1] for f in found] == ["mqgate.net.amqp (rule)"]


def test_checker_rejects_twisted_in_engines_and_config():
    """Any twisted import in an engine or in config is reported."""
    engine = _module("import twisted.python.log\n", name="mqgate.stomp.frames")
    config = _module("from twisted.python import usage\n", name="mqgate.config.schema")
    assert len(import_violations([engine], ENGINE_LAYERS, _pure_allowed, "r")) == 1
    assert len(import_violations([config], CONFIG_LAYERS, _pure_allowed, "r")) == 1


def test_checker_finds_io_modules_and_open_calls():
    """time, socket, os.path, io.open and a bare open() call are all reported."""
    m = _module("import time\nimport os.path\nfrom io import open as o, BytesIO\n"
                "def f(p):\n    import socket\n    return open(p)\n")
    found = io_violations([m], CORE_LAYERS)
    assert [f.split(": ", 1)[0] for f in found] == [
        "mqgate/core/thing.py:1", "mqgate/core/thing.py:2", "mqgate/core/thing.py:3",
        "mqgate/core/thing.py:5", "mqgate/core/thing.py:6"]


def test_checker_leaves_io_to_other_layers_and_allows_bytesio():
    """net/ may use sockets, and io.BytesIO in core is not file I/O."""
    net = _module("import socket\nopen('x')\n", name="mqgate.net.amqp")
    core = _module("from io import BytesIO\nimport io\n")
    assert io_violations([net, core], ENGINE_LAYERS + CORE_LAYERS) == []


def test_checker_reads_the_package_layout(tmp_path):
    """Module names and layers come from the paths: mqgate/sniff.py is layer 'sniff'."""
    pkg = tmp_path / "mqgate"
    (pkg / "amqp").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sniff.py").write_text("import socket\n")
    (pkg / "amqp" / "__init__.py").write_text("")
    modules = {m.name: m for m in iter_modules(pkg)}
    assert sorted(modules) == ["mqgate", "mqgate.amqp", "mqgate.sniff"]
    assert modules["mqgate.amqp"].is_package and modules["mqgate.amqp"].layer == "amqp"
    assert io_violations(modules.values(), ENGINE_LAYERS) == [
        "mqgate/sniff.py:1: mqgate.sniff imports socket "
        "(no sockets, clock, threads or files below net/)"]
