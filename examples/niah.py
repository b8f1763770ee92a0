"""Needle in a haystack for an optictx memory: does a 7-digit number survive, by depth and tier?

    python examples/niah.py [OUT]          # about a minute on 2 cores; needs Tesseract

Each cell hides one "special magic number" in a generated agent conversation, builds the memory's
context under the budget, reads the needle's page back with Tesseract and compares with keeping
only the newest turns (truncation). See `optictx niah --help` for every knob.
"""

import sys

from optictx.eval.niah import NiahConfig, run

config = NiahConfig(
    lengths=[16_000, 32_000],  # haystack sizes in tokens
    depths=[10, 50, 90],  # where the needle goes, in % of the transcript (0 = oldest)
    budgets=[0.25],  # the context gets a quarter of the transcript's tokens
    needle="number",  # or "uuid", "multikey", "multivalue", "multiquery", "free"
    out=sys.argv[1] if len(sys.argv) > 1 else "out/niah-example",
)
results = run(config)
print(results.paths["md"].read_text())
for cell in results.cells:
    print(f"{cell.cell.length:>6} tokens, depth {cell.cell.depth:>3g}%: needle page {cell.tiers[0]:>6}, "
          f"found via {cell.found[0]}, truncation {'kept' if cell.truncation[0] else 'lost'} it")
print("heatmap:", results.paths["heatmap_0.25"])
