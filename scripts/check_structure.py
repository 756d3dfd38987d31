"""Structural checks of gdro/ measured from the files (issues 21, 29, 38): function lengths, the central functions,
imports that go up a floor, the algorithm's size (gdro/algorithm/trainer.py's lines, ``Trainer``'s fields), the run's
lifecycle kept in one module, no module over 400 lines, no import circle and no module ``__getattr__``. Exit status 1
when a limit is broken.

    python scripts/check_structure.py            # longest functions, Lifecycle._fit, ppo_update, upward imports, ...
    python scripts/check_structure.py --top 20   # more of the longest functions

An import circle is a set of gdro modules that import each other, directly or through others (every import counts,
a function's too: a lazy import still ties the modules); ``from gdro.pkg import name`` is an import of
``gdro.pkg.name`` when that is a module, else of ``gdro.pkg`` (its ``__init__``). Only written imports count: the
implicit import of a parent package that Python makes before a submodule is not an edge.

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (decorators excluded, docstring included). The
floors are those of docs/architecture.md: a module may import only from its own floor or below. A field of
``Trainer`` is an annotated name in its class body (a dataclass field). The lifecycle -- what writes the run dir:
checkpoints, the lock's checks, run.json -- lives in gdro/run/lifecycle.py and gdro/run/record.py: elsewhere
gdro.run.checkpoint and gdro.run.lock (with its gdro.run.lock_file and gdro.run.lock_holder) are imported only for
their configs, their error types, and (the entry point, before Hydra starts) the lock's holding.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "gdro"
MAX_FUNCTION = 80
MAX_MODULE_LINES = 400  # issue #38: one job per file
CENTRAL = {("gdro/run/lifecycle.py", "Lifecycle._fit"): 60, ("gdro/algorithm/trainer.py", "Trainer._step"): 60,
           ("gdro/policy/update.py", "ppo_update"): 60}
TRAINER, MAX_TRAINER_LINES, MAX_TRAINER_FIELDS = "gdro/algorithm/trainer.py", 250, 12
LIFECYCLE = ("gdro/run/lifecycle.py", "gdro/run/record.py")  # what writes the run dir through gdro.run.checkpoint/lock
LIFECYCLE_MODULES = ("gdro.run.checkpoint", "gdro.run.lock", "gdro.run.lock_file", "gdro.run.lock_holder")
LIFECYCLE_ELSEWHERE = {"CheckpointConfig", "LockConfig", "CheckpointError", "RunDirLocked", "RunDirLock", "hold"}

# docs/architecture.md, "Layers": each folder of gdro/ is one floor, read bottom-up. A module may import from its own
# folder or from a lower floor; folders that share a floor do not import each other. No module sits outside a folder
# (gdro/__init__.py only applies the portable mode and registers resolvers and the moved-module finder).
FLOORS = {
    0: ["common"],  # the seams (interfaces, rollout records), config checks, I/O errors, Ctrl-C, portable mode
    1: ["controllers", "grading", "loss"],  # the math: the adversaries and budget rules, grading, losses, advantages
    2: ["data"],  # tasks, benchmarks and prompts
    3: ["models"],  # loading and building models, LoRA
    4: ["rollout"],  # rollout engines (HF generate, vLLM)
    5: ["parallel"],  # processes: torch.distributed, FSDP2, the process group
    6: ["policy"],  # the policy's forward and update
    7: ["algorithm"],  # the trainer, its filters, its execution object and what a step records
    8: ["run"],  # the run's lifecycle and its files: checkpoints, lock, migrations, run.json
    9: ["compose", "report"],  # the composition root (config -> objects); reading finished runs
    10: ["cli"],  # entry points: gdro-train, gdro-eval, gdro-rescore, gdro-report and their shared app code
}
FLOOR_OF = {name: floor for floor, names in FLOORS.items() for name in names}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def folder(module: str) -> str | None:
    """The folder of gdro/ a module sits in (``gdro.algorithm.trainer`` -> ``algorithm``); None for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOOR_OF) else None


def floor(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "gdro":
        return None
    return FLOOR_OF.get(parts[1])


def functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node.end_lineno - node.lineno + 1
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


def imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def lifecycle_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each import of the lifecycle's writers: a name of a module of :data:`LIFECYCLE_MODULES`
    (gdro.run.checkpoint, gdro.run.lock and the lock's own modules) beyond :data:`LIFECYCLE_ELSEWHERE`, or such a
    module as a whole."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in LIFECYCLE_MODULES:
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name not in LIFECYCLE_ELSEWHERE]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:  # from gdro.run import lock
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if f"{node.module}.{a.name}" in LIFECYCLE_MODULES]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name in LIFECYCLE_MODULES]
    return found


def dataclass_fields(tree: ast.AST, cls: str) -> list[str]:
    """The annotated names in class ``cls``'s body (its dataclass fields; ``ClassVar`` ones excepted)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                    and "ClassVar" not in ast.unparse(n.annotation)]
    return []


def import_targets(tree: ast.AST, known: set[str]) -> set[str]:
    """The gdro modules this module imports (module-level and lazy), resolved against ``known`` module names."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("gdro"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
    return {m for m in out if m in known}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def module_getattr(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=8, help="how many of the longest functions to list")
    args = ap.parse_args()
    lengths, upward, unplaced, lifecycle = [], [], [], []
    trainer_lines, trainer_fields = 0, []
    big, getattrs, trees = [], [], {}
    known = {module_name(p) for p in PKG.rglob("*.py")}
    for path in sorted(PKG.rglob("*.py")):
        rel, mod = path.relative_to(ROOT).as_posix(), module_name(path)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        trees[mod] = tree
        if (n_lines := len(text.splitlines())) > MAX_MODULE_LINES:
            big.append(f"{rel}: {n_lines} lines")
        if module_getattr(tree):
            getattrs.append(rel)
        lengths += [(n, rel, name) for name, n in functions(tree)]
        if rel == TRAINER:
            trainer_lines, trainer_fields = len(text.splitlines()), dataclass_fields(tree, "Trainer")
        if rel not in LIFECYCLE and mod not in LIFECYCLE_MODULES:
            lifecycle += [f"{rel}:{line} imports {what}" for line, what in lifecycle_imports(tree)]
        mine = floor(mod)
        if mine is None and mod != "gdro":
            unplaced.append(rel)
            continue
        for line, target in imports(tree):
            theirs = floor(target)
            if mine is None or theirs is None:
                continue
            if theirs > mine or (theirs == mine and folder(target) != folder(mod)):
                upward.append(f"{rel}:{line} ({folder(mod)}/, floor {mine}) imports {target} "
                              f"({folder(target)}/, floor {theirs})")
    lengths.sort(reverse=True)
    failed = False
    print(f"longest functions in gdro/ (limit {MAX_FUNCTION} lines):")
    for n, rel, name in lengths[: args.top]:
        print(f"  {n:4d}  {rel}:{name}")
    over = [x for x in lengths if x[0] > MAX_FUNCTION]
    failed |= bool(over)
    for (rel, name), limit in CENTRAL.items():
        n = next((n for n, r, f in lengths if r == rel and f == name), None)
        print(f"{rel}:{name}: {n} lines (limit {limit})")
        failed |= n is None or n > limit
    print(f"{TRAINER}: {trainer_lines} lines (limit {MAX_TRAINER_LINES}); Trainer: {len(trainer_fields)} fields "
          f"(limit {MAX_TRAINER_FIELDS}): {', '.join(trainer_fields)}")
    failed |= trainer_lines > MAX_TRAINER_LINES or len(trainer_fields) > MAX_TRAINER_FIELDS or not trainer_fields
    print(f"lifecycle imports outside {', '.join(LIFECYCLE)}: {len(lifecycle)}")
    for u in lifecycle:
        print("  " + u)
    failed |= bool(lifecycle)
    print(f"imports from a higher floor or a folder beside: {len(upward)}")
    for u in upward:
        print("  " + u)
    if unplaced:
        print("modules in no floor folder (move them into one of FLOORS): " + ", ".join(unplaced))
    failed |= bool(upward) or bool(unplaced)
    print(f"modules over {MAX_MODULE_LINES} lines: {len(big)}")
    for b in big:
        print("  " + b)
    graph = {m: import_targets(t, known) - {m} for m, t in trees.items()}
    found = circles(graph)
    print(f"import circles: {len(found)}")
    for c in found:
        print("  " + " <-> ".join(c))
    print(f"module __getattr__ in gdro/: {len(getattrs)}")
    for g in getattrs:
        print("  " + g)
    failed |= bool(big) or bool(found) or bool(getattrs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
