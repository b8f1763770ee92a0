"""Evaluation harnesses (fidelity now; needle-in-a-haystack arrives with its issue). Needs the
`eval` extra: tesserocr, rapidfuzz, matplotlib."""
