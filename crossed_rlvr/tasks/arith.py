"""The fresh arithmetic probe (paper 001 §3, App. C.1).

Expressions use integers, parentheses, +, −, × and exact integer division, with answers bounded by
10,000 in magnitude, in strata of 2, 3 and 4 operations. Every label is checked by a separate
whitelisted AST evaluator with exact rational arithmetic (never ``eval``). Development and test
items are disjoint (no expression appears in both). Each item carries a step-by-step worked
solution, used as an SFT target.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from fractions import Fraction

from crossed_rlvr.errors import CrossedError

MAX_ABS = 10_000
OPS = ("+", "-", "*", "/")
STRATA = (2, 3, 4)  # operations per expression, one stratum each (App. C.1)
MAX_OPERAND = 30


class UnsafeExpression(CrossedError, ValueError):
    """An expression outside the whitelist (names, calls, powers, ...)."""


def exact_value(expr: str) -> Fraction:
    """Evaluate an arithmetic expression exactly. Only integer literals, + - * / and unary minus.

    The expression is parsed into an AST and walked by hand; anything else is refused, so this
    never runs text as code. ``×`` and ``÷`` are accepted as ``*`` and ``/``.
    """
    src = expr.replace("×", "*").replace("÷", "/").replace("−", "-")
    if len(src) > 2000:
        raise UnsafeExpression("expression too long")
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as err:
        raise UnsafeExpression(f"not an arithmetic expression: {err.msg}") from None

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
            a, b = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if b == 0:
                raise ZeroDivisionError("division by zero")
            return a / b
        raise UnsafeExpression(f"{type(node).__name__} is not allowed in an arithmetic expression")

    return walk(tree)


@dataclass(frozen=True)
class Node:
    """A binary expression tree; leaves hold integers."""

    op: str | None = None
    left: Node | None = None
    right: Node | None = None
    value: int = 0

    def text(self, top: bool = True) -> str:
        if self.op is None:
            return str(self.value) if self.value >= 0 else f"({self.value})"
        inner = f"{self.left.text(False)} {self.op} {self.right.text(False)}"  # type: ignore[union-attr]
        return inner if top else f"({inner})"


def _value(node: Node) -> Fraction:
    if node.op is None:
        return Fraction(node.value)
    a, b = _value(node.left), _value(node.right)  # type: ignore[arg-type]
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else Fraction(10**9)}[node.op]


def _random_tree(rng: random.Random, n_ops: int, max_operand: int = 30, ops: tuple[str, ...] = OPS) -> Node:
    if n_ops == 0:
        return Node(value=rng.randint(1, max_operand))
    left_ops = rng.randint(0, n_ops - 1)
    op = rng.choice(ops)
    return Node(op, _random_tree(rng, left_ops, max_operand, ops), _random_tree(rng, n_ops - 1 - left_ops, max_operand, ops))


def _ok(node: Node) -> bool:
    """Every intermediate value is an integer bounded by MAX_ABS (exact integer division only)."""
    if node.op is None:
        return True
    if not (_ok(node.left) and _ok(node.right)):  # type: ignore[arg-type]
        return False
    if node.op == "/" and _value(node.right) == 0:  # type: ignore[arg-type]
        return False
    v = _value(node)
    return v.denominator == 1 and abs(v) <= MAX_ABS


def worked_solution(node: Node) -> tuple[list[str], int]:
    """Step-by-step lines, innermost first: 'Step k: a op b = c'."""
    steps: list[str] = []

    def solve(n: Node) -> int:
        if n.op is None:
            return n.value
        a, b = solve(n.left), solve(n.right)  # type: ignore[arg-type]
        c = int(_value(Node(n.op, Node(value=a), Node(value=b))))
        steps.append(f"Step {len(steps) + 1}: {a if a >= 0 else f'({a})'} {n.op} {b if b >= 0 else f'({b})'} = {c}")
        return c

    return steps, solve(node)


def generate(n_per_stratum: dict[int, int], seed: int, exclude: AbstractSet[str] = frozenset(), max_operand: int = 30,
             ops: tuple[str, ...] = OPS) -> list[dict]:
    """Items with unique expressions, ``n_per_stratum[ops]`` of each stratum, checked by ``exact_value``.

    ``max_operand`` and ``ops`` make easier variants (e.g. single digits, + and -) for tiny models.
    """
    rng = random.Random(seed)
    items, seen = [], set(exclude)
    for n_ops, count in sorted(n_per_stratum.items()):
        made, tries = 0, 0
        while made < count:
            tries += 1
            if tries > 200 * count + 10_000:
                raise ValueError(f"cannot find {count} distinct {n_ops}-operation expressions with these limits")
            tree = _random_tree(rng, n_ops, max_operand, tuple(ops))
            if not _ok(tree):
                continue
            expr = tree.text()
            if expr in seen:
                continue
            steps, answer = worked_solution(tree)
            if exact_value(expr) != answer:  # the separate checker must agree with the generator
                raise AssertionError(f"label check failed for {expr}")
            seen.add(expr)
            items.append({
                "question": f"Compute {expr}.",
                "expression": expr,
                "reference": str(answer),
                "solution": "\n".join(steps),
                "stratum": f"{n_ops}ops",
            })
            made += 1
    return items


def make_splits(n_test: int = 500, n_dev: int = 32, seed: int = 20260908, strata_ops: tuple[int, ...] = STRATA,
                max_operand: int = MAX_OPERAND, ops: tuple[str, ...] = OPS) -> dict[str, list[dict]]:
    """Disjoint dev and test sets, strata as even as possible (500 -> 167/167/166, App. C.1)."""

    def strata(n: int) -> dict[int, int]:
        base, extra = divmod(n, len(strata_ops))
        return {k_ops: base + (1 if k < extra else 0) for k, k_ops in enumerate(strata_ops)}

    test = generate(strata(n_test), seed, max_operand=max_operand, ops=ops)
    dev = generate(strata(n_dev), seed + 1, exclude={it["expression"] for it in test}, max_operand=max_operand,
                   ops=ops)
    for split, items in (("test", test), ("dev", dev)):
        for k, it in enumerate(items):
            it["item_id"] = f"{split}-{k}" if split == "dev" else str(k)
            it["split"] = split
    return {"test": test, "dev": dev}
