"""Dependencies run one way: inference <- training <- eval <- scripts.

Every import of every module in inference/, training/ and eval/ is read with `ast`, including the imports
inside functions, and none may reach into a higher layer. The runtime (inference/) must also import without
torch: no `torch` / `transformers` import at module level there (inside a function is fine: that is the
opt-in torch backend).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"inference": 0, "training": 1, "eval": 2, "scripts": 3}
HEAVY = {"torch", "transformers"}  # not importable at module level in the runtime


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports(path: Path, package: str | None = None) -> list[tuple[int, str, bool]]:
    """(line, absolute top-level module name, at module level) for every import in the file.

    Relative imports stay inside their own package, so they are resolved to that package's name.
    "At module level" means run when the module is imported: outside any function body and outside an
    `if TYPE_CHECKING:` block.
    """
    package = package or path.relative_to(ROOT).parts[0]
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            level = module_level
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or isinstance(child, ast.If) and _is_type_checking(child):
                level = False
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name.split(".")[0], level) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                top = package if child.level else (child.module or "").split(".")[0]
                found.append((child.lineno, top, level))
            visit(child, level)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), True)
    return found


def test_every_layer_has_modules():
    for package in ("inference", "training", "eval"):
        assert _modules(package), package


@pytest.mark.parametrize("package", ["inference", "training", "eval"])
def test_no_import_from_a_higher_layer(package):
    own = LAYERS[package]
    bad = []
    for path in _modules(package):
        for line, top, _ in imports(path):
            if LAYERS.get(top, -1) > own:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {top} (layer {LAYERS[top]} > {own})")
    assert not bad, "imports against the layering inference <- training <- eval <- scripts:\n" + "\n".join(bad)


def test_runtime_imports_no_torch_at_module_level():
    bad = [f"{path.relative_to(ROOT)}:{line} imports {top} at module level"
           for path in _modules("inference") for line, top, module_level in imports(path)
           if module_level and top in HEAVY]
    assert not bad, "inference/ must import without torch:\n" + "\n".join(bad)


def test_the_walker_sees_imports_inside_functions(tmp_path):
    src = tmp_path / "probe.py"
    probe = ("import os\n"
             "from typing import TYPE_CHECKING\n"
             "if TYPE_CHECKING:\n    import torch\n"
             "def f():\n    from eval.metrics import x\n    from . import trainer\n")
    src.write_text(probe)
    got = imports(src, "training")
    assert (1, "os", True) in got
    assert (4, "torch", False) in got
    assert (6, "eval", False) in got
    assert (7, "training", False) in got
