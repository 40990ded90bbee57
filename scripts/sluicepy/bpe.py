# scripts/sluicepy/bpe.py: byte-level BPE as Hugging Face tokenizer.json
# stores it: a small trainer for the tiny checkpoints, the tokenizer.json and
# tokenizer_config.json each family ships, and a plain encoder/decoder used as
# a test oracle. Python `re` has no \p{L}: pre-tokenization is exact for ASCII
# text only; the JSON always states the family's real pre-tokenizer.
import argparse
import json
import os
import re
import sys
import unicodedata

from . import SluiceError

# The regexes the real tokenizers run (architectures.md §9.1, §9.2).
GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _python_regex(pattern):
    # \p{L} ~ word characters that are not digits or '_'; \p{N} ~ \d. Exact on ASCII.
    letter, number, other = r"[^\W\d_]", r"\d", r"(?:[^\s\w]|_)"
    p = pattern.replace(r"[^\s\p{L}\p{N}]", other)
    p = p.replace(r"[^\r\n\p{L}\p{N}]", r"(?:[^\r\n\w]|_)")
    p = p.replace(r"\p{L}", letter).replace(r"\p{N}", number)
    return re.compile(p)


# Per family: the special tokens at ids 0.. (config.json: pad 1, eos 2), the
# pre-tokenizer, decoder and post-processor blocks as the real files write them.
_SPECIALS = {
    # Real OLMoE: <|endoftext|> 0, <|padding|> 1, and the Instruct models use
    # |||IP_ADDRESS||| as both bos and eos (architectures.md §9.1).
    "olmoe": ["<|endoftext|>", "<|padding|>", "|||IP_ADDRESS|||"],
    "qwen3_moe": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    # Stand-ins: the tiny DeepSeek/K2/Mixtral checkpoints carry a byte-level BPE with
    # the family's bos/eos at the config's ids (0/1, 0/1, 1/2); their real
    # tokenizers (§9.3-§9.5) are tested on the real files, never on tiny models.
    "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"],
    "kimi_k2": ["[BOS]", "[EOS]", "<|im_end|>"],
    "mixtral": ["<unk>", "<s>", "</s>"],
    # Kimi-Linear's config: pad 0, bos 1, eos 2 = <|im_end|> (its real eos, §9.4), then the
    # chat template's role and separator tokens.
    "kimi_linear": ["[PAD]", "[BOS]", "<|im_end|>", "<|im_system|>", "<|im_user|>", "<|im_assistant|>",
                    "<|im_middle|>"],
    # Kimi K3-tiny (k3.md §5, §6): bos 1, eos 2 = <|end_of_msg|>, then XTML's markup tokens.
    "kimi_k3": ["[PAD]", "[BOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"],
}
# Specials at the top of the vocabulary, after the merges: K3-tiny's media tokens end at
# 509 = its media_placeholder_token_id (with vocab_size 512), as K3's end at 163605 (k3.md §4.3).
# DeepSeek-V3's and Kimi's tool-call markers, in their real order (architectures.md
# §9.3-§9.4, serving.md §7): DeepSeek's at 128806-128814, added as normalized
# non-special tokens as its tokenizer.json has them; Kimi's at 163595-163599.
_DEEPSEEK_TOOL_MARKERS = ["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                          "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                          "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>"]
_KIMI_TOOL_MARKERS = ["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                      "<|tool_call_argument_begin|>", "<|tool_call_end|>"]
_TAIL_SPECIALS = {"kimi_k3": ["<|media_begin|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>",
                              "<|reserved_token_510|>", "<|reserved_token_511|>"],
                  "deepseek_v3": _DEEPSEEK_TOOL_MARKERS, "kimi_k2": _KIMI_TOOL_MARKERS,
                  "kimi_linear": _KIMI_TOOL_MARKERS}
# Added tokens the real tokenizer marks normalized and not special (the rest are special).
_PLAIN_ADDED = set(_DEEPSEEK_TOOL_MARKERS)


def _added_flags(token):
    plain = token in _PLAIN_ADDED
    return {"normalized": plain, "special": not plain}
_BYTE_LEVEL_OLMOE = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                     "use_regex": True}
_BYTE_LEVEL_QWEN = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False}
_SPLIT_THEN_BYTES = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
    _BYTE_LEVEL_QWEN]}
_PRE_TOKENIZER = {"olmoe": _BYTE_LEVEL_OLMOE, "qwen3_moe": _SPLIT_THEN_BYTES, "deepseek_v3": _SPLIT_THEN_BYTES,
                  "kimi_k2": _SPLIT_THEN_BYTES, "mixtral": _SPLIT_THEN_BYTES, "kimi_linear": _SPLIT_THEN_BYTES,
                  "kimi_k3": _SPLIT_THEN_BYTES}
_TULU_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + eos_token }}"
    "{% if not loop.last %}{{ '\\n' }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}")
_CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# §9.4: <|im_{role}|>{role}<|im_middle|>{content}<|im_end|> per message.
_KIMI_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_' + message['role'] + '|>' + message['role'] + '<|im_middle|>' + message['content'] + '<|im_end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_assistant|>assistant<|im_middle|>' }}{% endif %}")
CORPUS = os.path.join(os.path.dirname(__file__), "corpus.txt")


def byte_alphabet():
    """The 256 printable characters GPT-2 byte-level BPE stands bytes 0..255 in for."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = {}
    extra = 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def pre_tokenizer_regex(pre_tokenizer):
    """The Python approximation of a tokenizer.json pre_tokenizer's split regex."""
    if pre_tokenizer.get("type") == "ByteLevel" and pre_tokenizer.get("use_regex", True):
        return _python_regex(GPT2_REGEX)
    if pre_tokenizer.get("type") == "Sequence":
        for p in pre_tokenizer.get("pretokenizers", []):
            if p.get("type") == "Split":
                return _python_regex(p["pattern"]["Regex"])
    raise SluiceError(f"tokenizer.json: pre_tokenizer {pre_tokenizer} is not one sluicepy knows")


def train(text, regex, merges_wanted):
    """Learns up to `merges_wanted` merges (pairs seen at least twice).

    The most frequent pair wins; ties go to the lexicographically smallest pair."""
    alphabet = byte_alphabet()
    counts = {}
    for piece in regex.findall(text):
        word = tuple(alphabet[b] for b in piece.encode("utf-8"))
        counts[word] = counts.get(word, 0) + 1
    words = [list(w) for w in counts]
    freq = list(counts.values())
    pair_count, where = {}, {}
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_count[pair] = pair_count.get(pair, 0) + freq[i]
            where.setdefault(pair, set()).add(i)
    merges = []
    while len(merges) < merges_wanted and pair_count:
        best = min(pair_count, key=lambda p: (-pair_count[p], p))
        if pair_count[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for i in sorted(where.pop(best, ())):
            w = words[i]
            for pair in zip(w, w[1:]):
                pair_count[pair] -= freq[i]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for pair in zip(out, out[1:]):
                pair_count[pair] = pair_count.get(pair, 0) + freq[i]
                where.setdefault(pair, set()).add(i)
        pair_count = {p: c for p, c in pair_count.items() if c > 0}
    return merges


def build_tokenizer_json(family, vocab_size, text=None):
    """tokenizer.json for `family` with at most `vocab_size` ids (exactly, when
    the corpus has enough repeated pairs), merges learnt from `text` (default:
    the embedded corpus)."""
    specials, tail = _SPECIALS[family], _TAIL_SPECIALS.get(family, [])
    alphabet = byte_alphabet()
    if vocab_size < len(specials) + len(tail) + 256:
        raise SluiceError(f"vocab_size {vocab_size} cannot hold {len(specials)} specials + 256 bytes")
    pre = _PRE_TOKENIZER[family]
    if text is None:
        with open(CORPUS, encoding="utf-8") as f:
            text = f.read()
    text = unicodedata.normalize("NFC", text)
    merges = train(text, pre_tokenizer_regex(pre), vocab_size - len(specials) - len(tail) - 256)
    vocab = {s: i for i, s in enumerate(specials)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    for token in tail:
        vocab[token] = len(vocab)
    added = [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              **_added_flags(s)} for s in specials + tail]
    byte_level = _BYTE_LEVEL_OLMOE if family == "olmoe" else _BYTE_LEVEL_QWEN
    empty_affix = None if family == "olmoe" else ""
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"}, "pre_tokenizer": pre,
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": empty_affix, "end_of_word_suffix": empty_affix,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


def build_tokenizer_config(family, config):
    specials, tail = _SPECIALS[family], _TAIL_SPECIALS.get(family, [])
    ids = list(range(len(specials))) + [config["vocab_size"] - len(tail) + i for i in range(len(tail))]
    decoder = {str(i): {"content": s, "lstrip": False, "rstrip": False, "single_word": False, **_added_flags(s)}
               for i, s in zip(ids, specials + tail)}
    common = {"add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder,
              "unk_token": None,
              "model_max_length": config.get("max_position_embeddings", config.get("model_max_length"))}
    if family == "olmoe":
        return {**common, "bos_token": specials[2], "eos_token": specials[2], "pad_token": specials[1],
                "chat_template": _TULU_TEMPLATE, "clean_up_tokenization_spaces": True,
                "tokenizer_class": "GPTNeoXTokenizer"}
    qwen = family == "qwen3_moe"
    bos, eos = (None, 2) if qwen else (config["bos_token_id"], config["eos_token_id"])
    return {**common, "add_prefix_space": False, "bos_token": None if bos is None else specials[bos],
            "eos_token": specials[eos], "pad_token": specials[0],
            "chat_template": _KIMI_TEMPLATE if family == "kimi_linear" else _CHATML_TEMPLATE,
            **({"chat_template": None} if family == "kimi_k3" else {}),  # K3's prompts are code (XTML)
            "clean_up_tokenization_spaces": False, "errors": "replace", "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer" if qwen else "PreTrainedTokenizerFast"}


class Tokenizer:
    """Encoder/decoder over a tokenizer.json with a byte-level BPE model."""

    def __init__(self, spec):
        model = spec.get("model", {})
        if model.get("type") != "BPE":
            raise SluiceError(f"tokenizer.json: model type {model.get('type')!r} is not BPE")
        self.vocab = dict(model["vocab"])
        self.ranks = {}
        for rank, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = rank
        self.added = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t for t, i in self.added.items()})
        self.regex = pre_tokenizer_regex(spec["pre_tokenizer"])
        self.nfc = (spec.get("normalizer") or {}).get("type") == "NFC"
        self.byte_char = byte_alphabet()
        self.char_byte = {c: b for b, c in enumerate(self.byte_char)}
        longest_first = sorted(self.added, key=len, reverse=True)
        self.added_split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") \
            if longest_first else None

    @classmethod
    def from_file(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    def vocab_ids(self):
        return set(self.vocab.values()) | set(self.added.values())

    def _bpe(self, piece):
        symbols = [self.byte_char[b] for b in piece.encode("utf-8")]
        none = len(self.ranks)
        while len(symbols) > 1:
            best = min(zip(symbols, symbols[1:]), key=lambda p: self.ranks.get(p, none))
            if best not in self.ranks:
                break
            out, k = [], 0
            while k < len(symbols):
                if k + 1 < len(symbols) and (symbols[k], symbols[k + 1]) == best:
                    out.append(symbols[k] + symbols[k + 1])
                    k += 2
                else:
                    out.append(symbols[k])
                    k += 1
            symbols = out
        return [self.vocab[s] for s in symbols]

    def encode(self, text):
        ids = []
        parts = self.added_split.split(text) if self.added_split else [text]
        for part in parts:
            if part in self.added:
                ids.append(self.added[part])
                continue
            if self.nfc:
                part = unicodedata.normalize("NFC", part)
            for piece in self.regex.findall(part):
                ids.extend(self._bpe(piece))
        return ids

    def decode(self, ids):
        out, pending = [], []
        for i in ids:
            token = self.id_to_token.get(i)
            if token is None:
                raise SluiceError(f"token id {i} is not in the vocabulary")
            if token in self.added:
                out.append(bytes(pending).decode("utf-8", errors="replace"))
                out.append(token)
                pending = []
            else:
                pending.extend(self.char_byte[c] for c in token)
        out.append(bytes(pending).decode("utf-8", errors="replace"))
        return "".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m sluicepy.bpe",
        description="Encode or decode with a tokenizer.json (oracle for ASCII text).")
    parser.add_argument("mode", choices=["encode", "decode"])
    parser.add_argument("tokenizer_json")
    parser.add_argument("text", help="text to encode, or comma-separated ids to decode")
    args = parser.parse_args(argv)
    tok = Tokenizer.from_file(args.tokenizer_json)
    if args.mode == "encode":
        print(json.dumps(tok.encode(args.text)))
    else:
        sys.stdout.write(tok.decode([int(x) for x in args.text.split(",") if x]))


if __name__ == "__main__":
    main()
