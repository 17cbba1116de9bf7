"""Summaries of samples: the same percentile definition everywhere (nearest rank, no interpolation)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least q% of the samples at or below it."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float], digits: int = 4) -> dict[str, Any]:
    """n, min, p50, p95, p99, max and mean of `values` (seconds or whatever unit the caller uses)."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "min": round(min(values), digits),
        "p50": round(percentile(values, 50), digits),
        "p95": round(percentile(values, 95), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
        "mean": round(sum(values) / len(values), digits),
    }


def median_run(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """Of repeated runs, the one with the median `key` (the lower of the two middle ones)."""
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


def ranges(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """min and max of each of `keys` across `rows` (the spread of repeated runs)."""
    return {key: {"min": min(row[key] for row in rows), "max": max(row[key] for row in rows)} for key in keys}


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, digits)


def against_floor(product_samples: dict[str, list[float]], floor_samples: dict[str, list[float]],
                  metrics: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, float | None]]]:
    """Summaries of both sides and the product/floor ratio of p50 and p99 for each metric."""
    product = {m: summary(v) for m, v in product_samples.items()}
    floor = {m: summary(v) for m, v in floor_samples.items()}
    ratios = {m: {q: ratio(product[m].get(q), floor[m].get(q)) for q in ("p50", "p99")} for m in metrics}
    return product, floor, ratios
