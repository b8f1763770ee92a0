"""A memory's context answered by a local Unlimited OCR or DeepSeek-OCR 2 model
(pip install 'optictx[models]').

    python examples/local_model.py /path/to/unlimited-ocr     # a checkpoint folder on this disk
    python examples/local_model.py /path/to/deepseek-ocr-2    # the same, DeepEncoder V2
    python examples/local_model.py                            # no folder: the tiny random model

optictx downloads no weights. Get a checkpoint folder once, on a machine with network access, e.g.
`huggingface-cli download <org>/<checkpoint> --local-dir /models/unlimited-ocr`, and copy it here.
The folder needs config.json (its model_type says which model it is), *.safetensors and the
tokenizer files; it is loaded with local_files_only, use_safetensors and trust_remote_code=False.
Pages are encoded by the checkpoint's own vision tower; the tiny model shows the same path, with
random answers.
"""

import sys

from optictx import Budget, Memory
from optictx.models import OpticalModel, WindowedNGramGuard, tiny_unlimited_ocr
from optictx.sample import sample_conversation

if len(sys.argv) > 1:
    model = OpticalModel.from_pretrained(sys.argv[1])
else:
    model = OpticalModel(*tiny_unlimited_ocr(), window=16)
# Pages priced as this model encodes them, text counted with its own tokenizer: the budget is
# what its decoder holds.
mem = Memory(vision=model.vision, budget=Budget(tokens=3000), keep_recent=2, tokenizer=model.tokenizer)
for turn in sample_conversation()[:60]:
    mem.add(turn)
ctx = mem.context()
print(ctx.report())

question = "Which test failed, and what was the fix?"
guard = WindowedNGramGuard(35, 128, prompt_length=model.inputs(ctx, question).length)
for piece in model.stream(ctx, question, max_new_tokens=64, guard=guard):
    print(piece, end="", flush=True)
print()
total, prefilled = model.prefills[-1]
held = model.last_cache.stored_positions()[0] if model.rswa else model.last_cache.get_seq_length()
print(f"prompt {total} positions; KV held: {held} per layer ({'R-SWA' if model.rswa else 'full attention'})")
