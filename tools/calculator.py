"""A calculator tool that evaluates arithmetic safely (an AST walk, never `eval`)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from skyrl_sdk.tools.core import tool

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_MAX_EXPRESSION_CHARS = 500
_MAX_EXPONENT = 1000


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or is too large to evaluate."""


def evaluate(expression: str) -> int | float:
    """Evaluate `+ - * / // % **` and parentheses over numbers."""
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression.strip()!r}") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is too large")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise CalculatorError(
        f"unsupported syntax: {ast.unparse(node)!r} (only numbers and + - * / // % **)"
    )


def format_number(value: int | float) -> str:
    """Integers without a decimal point; floats rounded to 10 significant digits."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, int) else f"{value:.10g}"


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "(3 + 4) * 12".
    """
    return format_number(evaluate(expression))
