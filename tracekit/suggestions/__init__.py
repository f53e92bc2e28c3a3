"""Suggestions: rules over analyzer results, each with evidence and an estimated saving."""
