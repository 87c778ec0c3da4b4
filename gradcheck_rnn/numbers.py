"""How numbers are written for people, in one place, for the console and every report alike.

NaN is "nan" and ±Inf "inf"/"-inf" wherever they appear (results.json stores NaN as null, which
reads back as NaN); "-" means there is no number at all (a row that compared no tensor).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any


def from_json_number(value: Any) -> float:
    """A number as results.json or a row holds it (null for NaN, "inf"/"-inf" strings) as a float."""
    if value is None:
        return math.nan
    return float(value)


def fmt(value: Any, spec: str = ".3g") -> str:
    """A ratio, an error or a value: ``spec`` formatted; "nan", "inf", "-inf" as they are."""
    number = from_json_number(value)
    if math.isnan(number):
        return "nan"
    return format(number, spec)


def fmt_or_dash(value: float | None) -> str:
    """:func:`fmt`, or "-" where there is no number at all (None in memory, e.g. no tensor compared)."""
    return "-" if value is None else fmt(value)


def short_number(value: float) -> str:
    """A tolerance in few columns: 1e-4, 5e-07 → 5e-7, 0.02, 0."""
    text = f"{value:.3g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def compact(value: float) -> str:
    """A ratio in at most 8 columns: 0.00291, 6.12e-4 (not 0.000612), 1.2e+3 → 1.2e3."""
    if math.isnan(value):
        return "nan"
    if not math.isfinite(value):
        return f"{value:g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return min(f"{value:.3g}", f"{float(mantissa):g}e{int(exponent)}", key=len)


def location_text(location: dict[str, Any] | None) -> str:
    """(t=1,b=0,unit=2) — the worst element of a tensor in its own terms; "" when there is none."""
    return "(" + ",".join(f"{k}={v}" for k, v in location.items()) + ")" if location else ""


# A JSON string (left as it is) or a JSON number with a fraction or an exponent (a float).
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?[eE][+-]?\d+|-?\d+\.\d+')


def _shortest_number(token: str) -> str:
    """The shortest spelling of the decimal ``token`` spells: ``0.000469`` -> ``4.69e-4``,
    ``1.3e-07`` -> ``1.3e-7``, ``0.002`` -> ``2e-3``. The same decimal value, so it reads back as
    the same float (strict JSON either way)."""
    sign, digits, exponent = Decimal(token).normalize().as_tuple()
    mantissa = "".join(map(str, digits))
    scientific = (f"{'-' if sign else ''}{mantissa[0]}{'.' + mantissa[1:] if len(mantissa) > 1 else ''}"
                  f"e{exponent + len(mantissa) - 1}")
    return scientific if len(scientific) < len(token) else token


def shorten_json_numbers(text: str) -> str:
    """Compact JSON text with every float in its shortest spelling (results.json rows: ~3% fewer bytes)."""
    return _JSON_TOKEN.sub(lambda m: m[0] if m[0][0] == '"' else _shortest_number(m[0]), text)
