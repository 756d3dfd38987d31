"""Stateful controllers and their allocation math (issue 31; the package move fills in the rest)."""
