"""The vLLM and SGLang releases verl pins, their wheels in a local cache, and the metric definitions read
from the wheels' source with ``ast`` (nothing is installed or imported: the engines need CUDA).

    python3 -m tests.engine_wheels      # download the pinned wheels into the cache (.ci/run does)

The cache is ``$ENGINE_WHEEL_CACHE``, else ``~/.cache/rl-insight-wheels``; a wheel already there is
not fetched again. Tests read the cache only; they never reach the network.
"""

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENGINES = ("vllm", "sglang")
KINDS = ("gauge", "counter", "histogram", "summary", "info", "enum")


def cache_dir() -> Path:
    return Path(os.environ.get("ENGINE_WHEEL_CACHE") or Path.home() / ".cache" / "rl-insight-wheels")


def pinned_versions(distribution: str = "verl") -> dict[str, str]:
    """{engine: version} from the installed verl's own extras (``vllm==0.24.0; extra == "vllm"``)."""
    found = {}
    for requirement in importlib.metadata.requires(distribution) or ():
        match = re.match(r"(vllm|sglang)\s*==\s*([\w.]+)\s*;", requirement)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def wheel_path(engine: str, version: str, folder: Path | None = None) -> Path | None:
    """The cached wheel of ``engine`` ``version``, or None."""
    wheels = sorted((folder or cache_dir()).glob(f"{engine}-{version}-*.whl"))
    return wheels[0] if wheels else None


def download(folder: Path | None = None) -> list[Path]:
    """Fetch every pinned engine wheel that the cache lacks (``pip download --no-deps``)."""
    folder = folder or cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for engine, version in sorted(pinned_versions().items()):
        path = wheel_path(engine, version, folder)
        if path is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{engine}=={version}", "-d", str(folder)],
                check=True,
            )
            path = wheel_path(engine, version, folder)
        assert path is not None, f"pip downloaded no wheel of {engine}=={version} into {folder}"
        paths.append(path)
    return paths


def wheel_sources(path: Path, engine: str) -> dict[str, str]:
    """{file: text} of the wheel's Python files that spell a name of the engine's prefix (``"vllm:``)."""
    needles = (f'"{engine}:'.encode(), f"'{engine}:".encode())
    sources = {}
    with zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            if name.endswith(".py") and name.startswith(f"{engine}/"):
                data = wheel.read(name)
                if any(needle in data for needle in needles):
                    sources[name] = data.decode("utf-8", errors="replace")
    return sources


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str
    labels: frozenset[str]  # the string literals in its labelnames= (the labels beyond the shared list)
    where: str  # file:line


CLASS = re.compile(r"(Gauge|Counter|Histogram|Summary|Info|Enum)(Wrapper)?$")
CLASS_ATTRIBUTE = re.compile(r"_?(gauge|counter|histogram|summary|info|enum)_cls$")


def kind_of(call: ast.Call) -> str | None:
    """``Gauge(...)``, ``prometheus_client.Counter(...)``, ``self._histogram_cls(...)`` (vLLM keeps the
    class in an attribute): the kind, else None (``logger.info(...)`` is no metric)."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    match = CLASS.search(called) or CLASS_ATTRIBUTE.search(called)
    return match.group(1).lower() if match else None


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


class _Scope:
    """What a plain name in a function can hold: the strings assigned to it and, for loop targets, the
    matching element of each tuple in the literal it loops over (``for name, doc in specs``)."""

    def __init__(self, nodes: list[ast.AST]) -> None:
        self.assigned: dict[str, list[ast.expr]] = {}
        self.loops: list[tuple[ast.expr, ast.expr]] = []
        for tree in nodes:
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.assigned.setdefault(target.id, []).append(node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                    self.assigned.setdefault(node.target.id, []).append(node.value)
                elif isinstance(node, (ast.For, ast.comprehension)):
                    self.loops.append((node.target, node.iter))

    def literals(self, node: ast.expr, depth: int = 0) -> list[ast.expr]:
        """The literal expressions ``node`` may stand for (a Name through its assignments)."""
        if depth > 4:
            return []
        if isinstance(node, ast.Name):
            return [lit for value in self.assigned.get(node.id, []) for lit in self.literals(value, depth + 1)]
        return [node]

    def values(self, node: ast.expr, prefix: str, depth: int = 0) -> list[str]:
        """The strings of ``prefix`` that ``node`` (a name= argument) can be."""
        if depth > 4:
            return []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            return self._joined(node, prefix, depth)
        if not isinstance(node, ast.Name):
            return []
        found = [s for value in self.assigned.get(node.id, []) for s in self.values(value, prefix, depth + 1)]
        for target, iterable in self.loops:
            index = _position(target, node.id)
            if index is None:
                continue
            for literal in self.literals(iterable):
                if isinstance(literal, (ast.List, ast.Tuple, ast.Set)):
                    for element in literal.elts:
                        if index < 0:
                            found += self.values(element, prefix, depth + 1)
                        elif isinstance(element, ast.Tuple) and len(element.elts) > index:
                            found += self.values(element.elts[index], prefix, depth + 1)
        return [s for s in found if s.startswith(prefix)]

    def _joined(self, node: ast.JoinedStr, prefix: str, depth: int) -> list[str]:
        """An f-string whose every placeholder resolves to strings: each combination."""
        texts = [""]
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                texts = [t + part.value for t in texts]
            elif isinstance(part, ast.FormattedValue):
                options = self.values(part.value, "", depth + 1)
                if not options:
                    return []
                texts = [t + o for t in texts for o in options]
        return texts


def _position(target: ast.expr, name: str) -> int | None:
    """-1 when the loop target is ``name`` itself, the index when it is an element of a tuple target."""
    if isinstance(target, ast.Name):
        return -1 if target.id == name else None
    if isinstance(target, ast.Tuple):
        for index, element in enumerate(target.elts):
            if isinstance(element, ast.Name) and element.id == name:
                return index
    return None


def _metric_calls(tree: ast.AST) -> Iterator[tuple[ast.Call, str, ast.expr]]:
    """(call, kind, its name argument) of every metric construction in ``tree``."""
    for call in ast.walk(tree):
        if isinstance(call, ast.Call):
            kind = kind_of(call)
            name_arg = next((k.value for k in call.keywords if k.arg == "name"), None)
            if name_arg is None and call.args:
                name_arg = call.args[0]
            if kind is not None and name_arg is not None:
                yield call, kind, name_arg


def definitions(sources: dict[str, str], engine: str) -> dict[str, Definition]:
    """{name: Definition} of every metric of the engine's prefix that the sources construct: a call of a
    Gauge / Counter / Histogram (or a class attribute holding one) whose ``name=`` (or first argument) is a
    literal, an f-string of known parts or a name bound to such in its function or at the module's top
    level (also through a loop over a literal)."""
    prefix = f"{engine}:"
    found: dict[str, Definition] = {}
    for file, text in sorted(sources.items()):
        module = ast.parse(text, filename=file)
        top = [n for n in module.body if isinstance(n, (ast.Assign, ast.AnnAssign))]
        functions = [n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for tree in [module, *functions]:
            scope: _Scope | None = None
            for call, kind, name_arg in _metric_calls(tree):
                if isinstance(name_arg, ast.Constant):
                    names = [name_arg.value] if isinstance(name_arg.value, str) else []
                else:
                    scope = scope or _Scope([*top, tree] if tree is not module else top)
                    names = scope.values(name_arg, prefix)
                labels_arg = next((k.value for k in call.keywords if k.arg == "labelnames"), None)
                labels = frozenset(_strings(labels_arg)) if labels_arg is not None else frozenset()
                for name in names:
                    if name.startswith(prefix):
                        found.setdefault(name, Definition(name, kind, labels, f"{file}:{call.lineno}"))
    return found


def problems(used: list[tuple[str, str, tuple[str, ...]]], defined: dict[str, Definition], release: str) -> list[str]:
    """What of ``used`` ((name, kind, labels) the project relies on) ``release`` does not define so."""
    found = []
    for name, kind, labels in used:
        definition = defined.get(name)
        if definition is None:
            found.append(f"{name} ({kind}) is not defined in {release}")
        elif definition.kind != kind:
            found.append(f"{name} is a {definition.kind} in {release} ({definition.where}), not a {kind}")
        elif not set(labels) <= definition.labels:
            missing = ", ".join(sorted(set(labels) - definition.labels))
            found.append(f"{name} has no label {missing} in {release} ({definition.where})")
    return found


if __name__ == "__main__":
    for wheel in download(Path(sys.argv[1]) if len(sys.argv) > 1 else None):
        print(wheel)
