"""A memory's context as the fixed prefix of a local Unlimited OCR or DeepSeek-OCR 2 model.

    model = OpticalModel.from_pretrained("/models/unlimited-ocr")   # a local folder; nothing is downloaded
    print(model.answer(mem.context(vision="unlimited-ocr"), "What did the tool return for #12?"))

`build_inputs` lays the context out as one prompt: each page as one run of image placeholders
exactly as long as the positions the cost model charged (`PageSegment.tokens`), the open page and
the recent turns as the lines a page draws for them, other text as "ROLE: text", the question
last. `OpticalModel` encodes the pages (each (page, tier) at most once while it stays in the
visual-token cache), writes their features over the placeholders, prefills, and decodes with the
R-SWA cache, so the KV cache holds the prompt plus `window` tokens (DeepSeek-OCR 2, trained with
full attention, decodes with it unless `rswa=True`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from optictx.context import Context
from optictx.errors import CheckpointError, ConfigError, ModelError
from optictx.lru import LRU
from optictx.pieces import PageSegment, common_run
from optictx.readers import CachedReader
from optictx.tiers import Tier

from .families import Family, family_of, views
from .guard import WindowedNGramGuard
from .pages import encode
from .rswa import DEFAULT_WINDOW, rswa_cache

_TIER_OF_SIDE = {(t.side, t.side): t for t in (Tier.TINY, Tier.SMALL, Tier.BASE, Tier.LARGE)}


@dataclass(eq=False)
class OpticalInputs(Mapping[str, torch.Tensor]):
    """A context as model input: token ids with one placeholder run per imaged page.

    Indexed like transformers' `BatchFeature` (`inputs["input_ids"]`, `inputs["attention_mask"]`,
    `model.generate(**inputs)`); besides, what prefix reuse needs: the pages, their placeholder
    runs, and a key and end per prompt piece."""

    input_ids: torch.Tensor  # (1, length)
    pages: list[PageSegment]  # the imaged pages, in prompt order
    spans: list[tuple[int, int]]  # each page's placeholder run: [start, end) in input_ids
    image_token_id: int
    piece_keys: list[str] = field(default_factory=list)  # one per prompt piece (`Piece.key`), for prefix reuse
    piece_ends: list[int] = field(default_factory=list)  # where each piece ends in input_ids

    def common_prefix(self, other: OpticalInputs | None) -> int:
        """Tokens at the start that `other` has identically: the end of the longest run of equal
        piece keys (same pieces, so same KV)."""
        if other is None:
            return 0
        n = common_run(self.piece_keys, other.piece_keys)
        return self.piece_ends[n - 1] if n else 0

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.ones_like(self.input_ids)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in _MODEL_INPUTS:
            raise KeyError(f"{name!r}: OpticalInputs holds {', '.join(_MODEL_INPUTS)}")
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(_MODEL_INPUTS)

    def __len__(self) -> int:
        return len(_MODEL_INPUTS)

    @property
    def length(self) -> int:
        """Prompt length in tokens."""
        return self.input_ids.shape[1]


_MODEL_INPUTS = ("input_ids", "attention_mask")


def build_inputs(ctx: Context, tokenizer: Any, question: str, *, image_token_id: int | None = None) -> OpticalInputs:
    """`ctx` as one prompt for `tokenizer` (a tokenizer, or a processor holding one): its pieces
    in order (`Context.pieces`), each tokenized on its own, so a piece that did not change
    tokenizes the same in the next turn's prompt (the prefix-reuse contract); an image page is
    a run of placeholders as long as the positions the cost model charged; the question last."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    image_id = image_token_id if image_token_id is not None else tok.convert_tokens_to_ids(
        getattr(tok, "image_token", "<image>"))
    if image_id is None or image_id == tok.unk_token_id:
        raise ConfigError("the tokenizer has no image token: pass image_token_id= or register '<image>'")

    ids: list[int] = [tok.bos_token_id] if tok.bos_token_id is not None else []
    keys, ends, pages, spans = ["bos"], [len(ids)], [], []
    for piece in ctx.pieces:
        if piece.image is not None:
            spans.append((len(ids), len(ids) + piece.image.tokens))
            ids.extend([image_id] * piece.image.tokens)
            pages.append(piece.image)
        ids.extend(tok(piece.prompt, add_special_tokens=False).input_ids)
        keys.append(piece.key)
        ends.append(len(ids))
    question_piece = f"USER: {question}\nASSISTANT:"
    ids.extend(tok(question_piece, add_special_tokens=False).input_ids)
    keys.append("q:" + hashlib.sha256(question_piece.encode("utf-8", "surrogatepass")).hexdigest()[:16])
    ends.append(len(ids))
    return OpticalInputs(torch.tensor([ids], dtype=torch.long), pages, spans, image_id, keys, ends)


class VisualCache:
    """Visual tokens per (page digest, tier), least recently used out first, bounded in bytes."""

    def __init__(self, max_bytes: int = 512 * 2**20) -> None:
        self.encodes: dict[tuple[str, Tier], int] = {}  # how often each (page, tier) was encoded
        self._lru: LRU[tuple[str, Tier], torch.Tensor] = LRU(
            max_bytes=max_bytes, size_of=lambda t: t.numel() * t.element_size())

    @property
    def bytes(self) -> int:
        return self._lru.bytes

    def __len__(self) -> int:
        return len(self._lru)

    def features(self, model: Any, pages: list[PageSegment]) -> list[torch.Tensor]:
        keys = [(p.page.digest, p.tier) for p in pages]
        found = {k: f for k in keys if (f := self._lru.get(k)) is not None}
        todo = {k: p for k, p in zip(keys, pages) if k not in found}
        if todo:
            batch = [views(p, family=model.config.model_type) for p in todo.values()]
            for k, f in zip(todo, encode(model, batch)):
                self.encodes[k] = self.encodes.get(k, 0) + 1
                found[k] = self._lru[k] = f  # may evict older entries, never one this call returns
        return [found[k] for k in keys]


class Detokenizer:
    """Token ids in, text out as soon as it is whole characters. Only the tokens since the last
    line break are decoded again per token (a long OCR read stays linear), and decoding from a
    line start keeps tokenizers that mark a word's leading space in its token right."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._line: list[int] = []  # tokens since the last yielded line break
        self._shown = 0  # characters of their text already yielded

    def add(self, token: int) -> str:
        self._line.append(token)
        text = self.tokenizer.decode(self._line, skip_special_tokens=True)
        if len(text) <= self._shown or text.endswith("\ufffd"):  # an incomplete character: wait
            return ""
        piece, self._shown = text[self._shown :], len(text)
        if text.endswith("\n"):
            self._line, self._shown = [], 0
        return piece

    def flush(self) -> str:
        """What was held back for a character that never completed."""
        text = self.tokenizer.decode(self._line, skip_special_tokens=True)
        piece = text[self._shown :]
        self._line, self._shown = [], 0
        return piece


class OpticalModel:
    """An Unlimited OCR or DeepSeek-OCR 2 checkpoint answering questions about optictx contexts.
    One caller at a time: the prefix it reuses is the previous call's.

    `rswa`: decode under the R-SWA cache (prompt + `window` positions held however long the
    answer); by default on for Unlimited OCR, which was trained for it, and off (full attention)
    for DeepSeek-OCR 2, which was not.
    """

    def __init__(self, model: Any, tokenizer: Any, *, window: int = DEFAULT_WINDOW, rswa: bool | None = None,
                 visual_cache_bytes: int = 512 * 2**20, reuse_prefix: bool = True) -> None:
        self.family: Family = family_of(model.config.model_type)
        self.model = model.eval()
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.window = window
        self.rswa = self.family.rswa if rswa is None else rswa
        self.visual = VisualCache(visual_cache_bytes)
        self.reuse_prefix = reuse_prefix
        self.prefills: list[tuple[int, int]] = []  # (prompt tokens, tokens actually prefilled) per call
        self.last_cache: Any = None  # the R-SWA cache of the latest answer, for inspection
        self._last: tuple[OpticalInputs, list[tuple[torch.Tensor, torch.Tensor]]] | None = None

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> OpticalModel:
        """Load a checkpoint folder (config.json, *.safetensors, tokenizer files). Never downloads,
        never runs code from the folder, never unpickles."""
        folder = Path(path)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: no such checkpoint folder (optictx downloads no weights; "
                                    "see examples/local_model.py for how to get them)")
        missing = [n for n in ("config.json",) if not (folder / n).is_file()]
        if not any(folder.glob("*.safetensors")):
            missing.append("*.safetensors")
        if missing:
            raise CheckpointError(f"{folder}: incomplete checkpoint, missing {', '.join(missing)}")
        import transformers
        from transformers import AutoConfig, AutoTokenizer

        model_type = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False).model_type
        try:
            family = family_of(model_type)
        except ValueError as exc:
            raise ConfigError(f"{folder}: {exc}") from None
        model = getattr(transformers, family.model_class).from_pretrained(
            folder, local_files_only=True, use_safetensors=True, trust_remote_code=False)
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        return cls(model, tok, **kwargs)

    @property
    def vision(self) -> str:
        """The cost model this model's pages follow: `Memory(vision=model.vision, ...)`."""
        return self.family.vision

    def inputs(self, ctx: Context, question: str) -> OpticalInputs:
        if ctx.vision.name not in self.family.visions:
            raise ConfigError(f"the context was fitted for {ctx.vision.name!r}, but this model's pages cost what "
                             f"{self.vision!r} charges: build it with mem.context(vision={self.vision!r})")
        return build_inputs(ctx, self.tokenizer, question, image_token_id=self.model.config.image_token_id)

    @torch.no_grad()
    def embed(self, inputs: OpticalInputs, start: int = 0) -> torch.Tensor:
        """Embeddings of the prompt from position `start` on (a piece boundary), each page's
        visual tokens written over its placeholders. Pages before `start` are not looked up: their
        KV is reused, so an evicted one is not encoded again for nothing."""
        device = next(self.model.parameters()).device
        embeds = self.model.get_input_embeddings()(inputs.input_ids[:, start:].to(device))
        wanted = [(span, p) for span, p in zip(inputs.spans, inputs.pages) if span[1] > start]
        features = self.visual.features(self.model, [p for _, p in wanted])
        for ((a, b), _), f in zip(wanted, features):
            if f.shape[0] != b - a:  # the cost model and the encoder disagree: a bug, not noise
                raise ModelError(f"page has {f.shape[0]} visual tokens but {b - a} placeholders")
            first = max(a, start)
            embeds[0, first - start : b - start] = f[first - a :].to(embeds.dtype)
        return embeds

    @torch.no_grad()
    def stream(self, ctx: Context, question: str, *, max_new_tokens: int = 256,
               guard: WindowedNGramGuard | None = None) -> Iterator[str]:
        """The answer, piece by piece (greedy decoding under the R-SWA cache)."""
        inputs = self.inputs(ctx, question)
        out, cache = self._prefill(inputs)
        self.last_cache = cache
        yield from self._decode(out, cache, inputs.input_ids, max_new_tokens, guard)

    def _decode(self, out: Any, cache: Any, prompt_ids: torch.Tensor, max_new_tokens: int,
                guard: WindowedNGramGuard | None) -> Iterator[str]:
        seq = prompt_ids.to(out.logits.device)
        eos = self.tokenizer.eos_token_id
        text = Detokenizer(self.tokenizer)
        for step in range(max_new_tokens):
            scores = out.logits[:, -1, :].float()
            if guard is not None:
                scores = guard(seq, scores)
            nxt = scores.argmax(-1, keepdim=True)
            if eos is not None and int(nxt) == eos:
                break
            seq = torch.cat([seq, nxt], dim=1)
            if piece := text.add(int(nxt)):
                yield piece
            if step + 1 < max_new_tokens:  # the last token's logits would go unused
                out = self.model(input_ids=nxt, cache=cache, use_cache=True)
        if rest := text.flush():
            yield rest

    def _prefill(self, inputs: OpticalInputs) -> tuple[Any, Any]:
        """Prefill the prompt into a new R-SWA cache, reusing the KV of the start it shares with the
        previous call's prompt (at least one token is always computed: its logits start decoding)."""
        length = inputs.length
        reuse = 0
        if self.reuse_prefix and self._last is not None:
            reuse = min(inputs.common_prefix(self._last[0]), length - 1)
        cache = self._cache(length)
        if reuse:
            for layer, (k, v) in zip(cache.layers, self._last[1]):  # type: ignore[index]
                layer.update(k[..., :reuse, :], v[..., :reuse, :])
        embeds = self.embed(inputs, reuse)
        out = self.model(inputs_embeds=embeds, cache=cache, use_cache=True, logits_to_keep=1)
        # The prompt's rows never change while decoding: R-SWA keeps them apart from the window,
        # and a full cache concatenates new rows into new tensors. So references are enough.
        self._last = (inputs, [(layer.prefill_keys, layer.prefill_values) if self.rswa else (layer.keys, layer.values)
                               for layer in cache.layers])
        self.prefills.append((length, length - reuse))
        return out, cache

    def _cache(self, prefill_length: int | None = None) -> Any:
        if self.rswa:
            return rswa_cache(self.model.config, window=self.window, prefill_length=prefill_length)
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def read_image(self, image: Image.Image, prompt: str | None = None, *, max_new_tokens: int = 2048) -> str:
        """The text the model reads on one page image (a tier image: 512, 640, 1024 or 1280 px)."""
        tier = _TIER_OF_SIDE.get(image.size) if image.width == image.height else None
        if tier is None:
            raise ConfigError(f"a {image.width}x{image.height} image is no page tier; use PageSegment.image")
        (features,) = encode(self.model, [self.family.views(image, tier)])
        prompt = prompt or self.family.ocr_prompt
        tok = self.tokenizer
        ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + [self.model.config.image_token_id] * len(
            features) + tok("\n" + prompt, add_special_tokens=False).input_ids
        seq = torch.tensor([ids], dtype=torch.long)
        embeds = self.model.get_input_embeddings()(seq.to(features.device))
        start = 1 if tok.bos_token_id is not None else 0
        embeds[0, start : start + len(features)] = features.to(embeds.dtype)
        cache = self._cache()
        out = self.model(inputs_embeds=embeds, cache=cache, use_cache=True, logits_to_keep=1)
        guard = WindowedNGramGuard(35, self.window, prompt_length=len(ids))  # OCR loops without one
        return "".join(self._decode(out, cache, seq, max_new_tokens, guard))

    def answer(self, ctx: Context, question: str, *, max_new_tokens: int = 256,
               guard: WindowedNGramGuard | None = None) -> str:
        return "".join(self.stream(ctx, question, max_new_tokens=max_new_tokens, guard=guard))


class UnlimitedOcrReader(CachedReader):
    """The readers protocol on a local model, for `optictx fidelity` / `niah` style measurements:
    one greedy OCR pass per page image (the boxes are not needed: the model reads the page)."""

    def __init__(self, model: OpticalModel, *, prompt: str | None = None,
                 max_new_tokens: int = 2048, cache_size: int = 4096) -> None:
        super().__init__(workers=1, cache_size=cache_size)  # one model, one forward at a time
        self.model, self.prompt, self.max_new_tokens = model, prompt or model.family.ocr_prompt, max_new_tokens

    def _settings(self) -> str:
        return f"{id(self.model)}/{self.prompt}/{self.max_new_tokens}"

    def _recognize(self, image: Image.Image, boxes: Any) -> str:
        return self.model.read_image(image, self.prompt, max_new_tokens=self.max_new_tokens)
