"""Rule-generated math prompts: Sentinel negatives (docs/sentinel.md: math is derived, not looked up).

The only real math source here is MMLU's math subjects, always with four options. Options then mark one label
wherever MMLU's other half (the knowledge subjects, positives) is held out, and with `mmlu_math` held out
the recipe saw no math at all. These prompts put math into every surface style the recipe sees: a bare
question, an imperative ("Solve ..."), a word problem, and the options format of `format_options`. They are
written from scratch (arithmetic, algebra, geometry, probability, counting, sequences, statistics, calculus,
number theory, logic), never copied from an evaluation set, and deterministic for a seed.

    from training.data.math_prompts import math_prompts
    math_prompts(500, seed=0)  # -> 500 distinct prompt strings
"""

from __future__ import annotations

import random
from collections.abc import Callable

_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kofi", "Lena", "Maya", "Noor",
          "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq"]
_ITEMS = ["apples", "marbles", "pencils", "stickers", "cookies", "books", "coins", "cards", "shells", "stamps"]


def format_options(options: list[str], rng: random.Random) -> str:
    """Four (or more) answer options in one of the layouts exam prompts use: "A) x B) y", "A. x" per line,
    "(A) x (B) y"."""
    letters = "ABCDEFGH"[: len(options)]
    layout = rng.randrange(3)
    if layout == 0:
        return " ".join(f"{k}) {o}" for k, o in zip(letters, options))
    if layout == 1:
        return "\n".join(f"{k}. {o}" for k, o in zip(letters, options))
    return " ".join(f"({k}) {o}" for k, o in zip(letters, options))


def _numeric_options(answer: int, rng: random.Random) -> list[str]:
    """The answer and three nearby wrong values, shuffled (every generator's answer is an integer)."""
    wrong: set[int] = set()
    while len(wrong) < 3:
        delta = rng.choice([-10, -3, -2, -1, 1, 2, 3, 5, 10])
        cand = answer + delta if rng.random() < 0.7 else answer * rng.choice([2, 3])
        if cand != answer:
            wrong.add(cand)
    opts = [str(answer), *map(str, wrong)]
    rng.shuffle(opts)
    return opts


# Each generator returns (question text, numeric answer or None). Styles are applied by `_styled`.
def _arith(r):
    a, b = r.randint(12, 999), r.randint(2, 99)
    op, val = r.choice([("+", a + b), ("-", a - b), ("*", a * b), ("times", a * b)])
    return f"What is {a} {op} {b}?", val


def _linear(r):
    a, x, b = r.randint(2, 12), r.randint(-9, 15), r.randint(1, 40)
    return f"If {a}x + {b} = {a * x + b}, what is the value of x?", x


def _system(r):
    x, y = r.randint(1, 9), r.randint(1, 9)
    return f"Given x + y = {x + y} and x - y = {x - y}, what is x?", x


def _quadratic(r):
    p, q = r.randint(1, 9), r.randint(1, 9)
    return f"What is the sum of the roots of x^2 - {p + q}x + {p * q} = 0?", p + q


def _rectangle(r):
    w, h = r.randint(2, 30), r.randint(2, 30)
    kind, val = r.choice([("area", w * h), ("perimeter", 2 * (w + h))])
    return f"A rectangle is {w} cm wide and {h} cm long. What is its {kind}?", val


def _triangle(r):
    a, b = r.choice([(3, 4), (5, 12), (8, 15), (7, 24), (6, 8), (9, 12)])
    k = r.randint(1, 4)
    return f"A right triangle has legs of length {a * k} and {b * k}. How long is the hypotenuse?", int((a * a + b * b) ** 0.5) * k


def _angles(r):
    a, b = r.randint(20, 80), r.randint(20, 80)
    return f"Two angles of a triangle measure {a} and {b} degrees. What is the measure of the third angle?", 180 - a - b


def _dice(r):
    n = r.choice([6, 8, 10, 12, 20])
    k = r.randint(1, n // 2)
    return f"A fair {n}-sided die is rolled once. What is the probability of rolling a number no greater than {k}?", None


def _coins(r):
    n = r.randint(3, 6)
    return f"A fair coin is tossed {n} times. How many possible sequences of heads and tails are there?", 2 ** n


def _choose(r):
    n, k = r.randint(5, 12), r.randint(2, 4)
    from math import comb
    return f"In how many ways can a committee of {k} be chosen from {n} people?", comb(n, k)


def _sequence(r):
    a, d = r.randint(1, 20), r.randint(2, 9)
    n = r.randint(8, 30)
    return f"An arithmetic sequence starts {a}, {a + d}, {a + 2 * d}, ... What is its {n}th term?", a + (n - 1) * d


def _mean(r):
    xs = [r.randint(1, 30) for _ in range(r.randint(4, 6))]
    xs[-1] += (-sum(xs)) % len(xs)
    return f"What is the mean of the data set {', '.join(map(str, xs))}?", sum(xs) // len(xs)


def _median(r):
    xs = sorted(r.sample(range(1, 60), 5))
    shown = xs[:]
    r.shuffle(shown)
    return f"Find the median of {', '.join(map(str, shown))}.", xs[2]


def _derivative(r):
    a, n, x = r.randint(2, 9), r.randint(2, 4), r.randint(1, 3)
    return f"What is the derivative of f(x) = {a}x^{n} evaluated at x = {x}?", a * n * x ** (n - 1)


def _integral(r):
    a, b = r.randint(1, 5), r.randint(2, 6)
    return f"Evaluate the integral of {2 * a}x from 0 to {b}.", a * b * b


def _gcd(r):
    from math import gcd
    g = r.randint(2, 12)
    a, b = g * r.randint(2, 15), g * r.randint(2, 15)
    kind, val = r.choice([("greatest common divisor", gcd(a, b)), ("least common multiple", a * b // gcd(a, b))])
    return f"What is the {kind} of {a} and {b}?", val


def _modular(r):
    a, m = r.randint(20, 500), r.randint(3, 13)
    return f"What is the remainder when {a} is divided by {m}?", a % m


def _word_share(r):
    name, other = r.sample(_NAMES, 2)
    item = r.choice(_ITEMS)
    total, give = r.randint(20, 90), r.randint(2, 15)
    return (f"{name} has {total} {item} and gives {give} of them to {other}. Then {name} buys twice as many as "
            f"they gave away. How many {item} does {name} have now?"), total - give + 2 * give


def _word_rate(r):
    name = r.choice(_NAMES)
    speed, hours = r.randint(30, 90), r.randint(2, 6)
    return f"{name} drives at {speed} km per hour for {hours} hours. How far does {name} travel?", speed * hours


def _word_percent(r):
    price, pct = r.randint(4, 40) * 10, r.choice([10, 15, 20, 25, 30, 40, 50])
    return f"A jacket costs ${price} and is on sale for {pct}% off. What is the sale price?", price * (100 - pct) // 100


def _logic(r):
    a, b, c = r.sample(["cats", "dogs", "birds", "poets", "engineers", "students", "runners", "painters"], 3)
    return (f"All {a} are {b}. Some {b} are {c}. Which of the following must be true?"
            if r.random() < 0.5 else
            f"If every {a[:-1]} is a {b[:-1]} and no {b[:-1]} is a {c[:-1]}, can a {a[:-1]} be a {c[:-1]}?"), None


def _parity(r):
    n = r.choice(["even", "odd"])
    m = r.choice(["even", "odd"])
    op = r.choice(["sum", "product"])
    return f"Is the {op} of an {n} number and an {m} number always even, always odd, or neither?", None


_GENERATORS: list[Callable] = [_arith, _linear, _system, _quadratic, _rectangle, _triangle, _angles, _dice, _coins,
                               _choose, _sequence, _mean, _median, _derivative, _integral, _gcd, _modular,
                               _word_share, _word_rate, _word_percent, _logic, _parity]

_IMPERATIVES = ["Solve: {q}", "Calculate the answer: {q}", "Work this out step by step. {q}",
                "Show your working. {q}", "Help me with my homework: {q}", "{q} Explain your reasoning."]


def _styled(q: str, answer, r: random.Random) -> str:
    style = r.random()
    if style < 0.4 and answer is not None:  # options, as exam prompts have them
        return f"{q}\n{format_options(_numeric_options(answer, r), r)}"
    if style < 0.55 and q.startswith("What is "):  # a statement: "Compute 12 + 30."
        return f"{r.choice(['Compute ', 'Find ', 'Determine '])}{q[len('What is '):].rstrip('?')}."
    if style < 0.8:
        return r.choice(_IMPERATIVES).format(q=q)
    return q


def math_prompts(n: int, seed: int = 0) -> list[str]:
    """`n` distinct math prompts (fewer only if the generators run out of distinct ones)."""
    r = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    for _ in range(n * 20):
        q, ans = r.choice(_GENERATORS)(r)
        text = _styled(q, ans, r)
        if text not in seen:
            seen.add(text)
            out.append(text)
            if len(out) == n:
                break
    return out
