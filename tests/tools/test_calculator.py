"""The calculator tool: arithmetic only, bounded."""

import pytest

from skyrl_sdk.tools.calculator import CalculatorError, calculator, evaluate


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("(3 + 4) * 12", "84"),
        ("7 / 2", "3.5"),
        ("2 ** 10", "1024"),
        ("-5 // 2", "-3"),
        ("10 / 4 * 2", "5"),
    ],
)
def test_calculator(expression, value):
    assert calculator(expression=expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "unsupported syntax"),
        ("1 / 0", "division by zero"),
        ("9 ** 99999", "too large"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 600, "longer than"),
    ],
)
def test_calculator_refuses_non_arithmetic(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)
