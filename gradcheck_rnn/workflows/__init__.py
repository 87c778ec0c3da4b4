"""Workflows built on runs: shrink, emit-test, rerun, baselines, calibration, mutants.
"""
