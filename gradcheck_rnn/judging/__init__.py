"""Judging one case: the per-case context, the checks, comparisons and tolerances.
"""
