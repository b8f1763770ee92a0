"""The smallest useful optictx program: a long conversation in, a budgeted context out."""

from optictx import Budget, Memory

mem = Memory(vision="deepseek-ocr", budget=Budget(tokens=2000), keep_recent=4)
mem.add({"role": "system", "content": "You are a helpful assistant."})
for i in range(300):
    mem.add({"role": "user", "content": f"Note {i}: the build number for ticket T-{1000 + i} is {7919 * i}."})
    mem.add({"role": "assistant", "content": f"Noted build {7919 * i} for T-{1000 + i}."})

ctx = mem.context()
print(f"{len(mem)} turns: {mem.original_tokens()} tokens as they came, {ctx.tokens} in the context "
      f"({len(ctx.pages)} page images, {ctx.report()['turns_as_text']} turns as text)")
for page in ctx.pages:
    print(page.page.index, page.tier.value, page.tokens, "tokens, turns", page.turn_ids[0], "-", page.turn_ids[-1])
messages = ctx.to_openai()  # ready for client.chat.completions.create(model=..., messages=messages)
