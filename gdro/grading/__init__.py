"""Grading: the math-verify reward, gold preparation, and pass@k estimators."""
