#!/usr/bin/env python3
"""Checks the Spack recipe without Spack (CTest: Spack.recipe_matches_cmake): it is valid
Python, every variant cmake_args() reads is declared, and every kopt_* CMake option it sets
exists in CMakeLists.txt. Usage: check-spack-recipe.py [PACKAGE_PY] [CMAKELISTS]."""
import ast
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
recipe = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "spack/spack_repo/kopt/packages/kopt/package.py"
cmakelists = Path(sys.argv[2]) if len(sys.argv) > 2 else root / "CMakeLists.txt"

tree = ast.parse(recipe.read_text(), filename=str(recipe))  # SyntaxError: not valid Python


def strings(call):
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def calls(name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if called == name:
                yield node


variants = {strings(c)[0] for c in calls("variant") if strings(c)}
options = set(re.findall(r"option\(\s*(kopt_\w+)", cmakelists.read_text()))
errors = []
for c in calls("define_from_variant"):
    s = strings(c)
    if len(s) < 2 or s[1] not in variants:
        errors.append(f"define_from_variant{tuple(s)}: variant not declared ({sorted(variants)})")
for c in list(calls("define_from_variant")) + list(calls("define")):
    s = strings(c)
    if s and s[0].startswith("kopt_") and s[0] not in options:
        errors.append(f"{s[0]}: no such option() in {cmakelists.name} ({sorted(options)})")
for e in errors:
    print(f"{recipe}: {e}", file=sys.stderr)
print(f"{recipe.name}: {len(variants)} variants, {len(options)} CMake options checked: "
      + ("OK" if not errors else f"{len(errors)} problems"))
sys.exit(1 if errors else 0)
