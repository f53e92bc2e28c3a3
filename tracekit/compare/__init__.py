"""Comparisons of two analyses and the suggestions of the first (`tracekit diff`): above suggestions, below the report."""
