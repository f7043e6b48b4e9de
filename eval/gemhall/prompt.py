"""The confidence-target prompt. Built by concatenation, never str.format, so braces in questions are safe."""

from __future__ import annotations


def penalty(t: float) -> float:
    """The wrong-answer penalty that makes answering worth it only above confidence t: t / (1 - t)."""
    if not 0.0 <= t < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {t}")
    return t / (1.0 - t)


def format_number(x: float) -> str:
    """Short form: 0.75 -> '0.75', 9.000000000000002 -> '9', 2.3333 -> '2.33'."""
    return format(round(x, 2), "g") if abs(x) < 1e6 else f"{x:.3g}"


def format_penalty(t: float) -> str:
    return format_number(penalty(t))


def build_prompt(question: str, t: float) -> str:
    ts = format_number(t)
    return (
        question
        + "\n\nAnswer only if you are > " + ts + " confident. "
        + "Scoring: correct = +1, incorrect = -" + format_penalty(t) + ", IDK = 0. "
        + "If you are not > " + ts + ' confident, reply EXACTLY "IDK". '
        + "Output only the final answer (or IDK)."
    )
