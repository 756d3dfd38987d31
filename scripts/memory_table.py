"""Per-GPU memory estimates for GRPO on Qwen3-1.7B/4B/8B, one to eight GPUs (FSDP), as markdown tables.

    python scripts/memory_table.py

An estimate from shapes, not a measurement. GB = 10⁹ bytes. Parameters are counted from the Qwen3 shapes
(embedding; per layer q/k/v/o with GQA and head_dim, q_norm/k_norm, gate/up/down, two RMSNorms; final norm; an
LM head unless tied). Memory settings (micro-batch tokens, vLLM's share, sleep mode) and the paper's lengths are
read from conf/memory/<model>-vllm.yaml and conf/model/<model>.yaml. Per GPU, with N GPUs:

- training state, fully sharded (FSDP2) over N: fp32 master weights 4 B/param, fp32 grads 4, AdamW moments 8;
- gathered FSDP units (N > 1 only): units are each decoder layer, the input embedding (with the LM head when tied)
  and the LM head when untied. Peak = the largest unit (the V x h embedding) plus one prefetched decoder layer,
  all-gathered in fp32 (autocast, no FSDP param_dtype), x2 for their unsharded grads before the reduce-scatter;
- reference model in bf16 (2 B/param), sharded over N (replicated would be 2 B/param on every GPU);
- activations of one micro-batch (`optim.micro_batch_tokens` padded tokens, rows of prompt + response width) with
  gradient checkpointing: layer-boundary hidden states for every layer in fp32 (fp32 master weights keep the
  residual stream fp32 under autocast); one layer's recomputed activations, 26h + 10q + 10kv + 8i bytes a token
  (q, kv: query and key/value widths; saved tensors measured on the CPU under bf16 autocast), x2 for that
  layer's backward; the boolean attention mask (rows x width²); the LM head: final hidden states x3 (output, the
  selected positions, their grad) and one chunk of 2**26 logits (gdro/policy/kernels.py) x5 (bf16, fp32, scaled,
  log-softmax, grad); the memory-efficient or flash SDPA kernel (no width² scores);
- AdamW step (foreach, torch's default on CUDA): one fp32 temporary the size of the shard, after the backward;
- vLLM: one engine per GPU (tensor parallel 1) taking `gpu_memory_utilization` x capacity: bf16 weights
  (replicated) + KV cache; with sleep mode it holds nothing while the trainer trains. Its profiling peak (a dummy
  forward of `max_num_batched_tokens` tokens, taken out of the share before the KV cache) is printed apart;
- grads are kept between steps (the trainer sets them to None before each mini-batch, not after the step), so they
  count while generating. Capacities are taken as 80 and 141 GB (the cards report ≈ 85.5 and ≈ 150 GB): the gap
  is the margin for the CUDA context, NCCL buffers and fragmentation, which are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"
GB = 1e9
GPUS = (1, 2, 4, 8)
CAPACITIES = (80, 141)
LOGITS_CHUNK = 2**26  # gdro.policy.kernels.LOGITS_CHUNK_ELEMENTS (not imported: keeps this script torch-free)


@dataclass(frozen=True)
class Arch:
    name: str
    hidden: int
    layers: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + 2 * self.head_dim  # q, k, v, o (no bias); q_norm, k_norm
        return attn + 3 * h * self.inter + 2 * h  # gate, up, down; input and post-attention RMSNorm

    @property
    def embed(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        head = 0 if self.tied else self.embed
        return self.embed + self.layers * self.layer_params + self.hidden + head

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16

    def act_bytes_per_token(self) -> int:
        """Saved tensors of one decoder layer's forward per token (bf16 autocast, fp32 weights, SDPA)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 26 * self.hidden + 10 * q + 10 * kv + 8 * self.inter + 8


ARCHS = (
    Arch("qwen3-1.7b", 2048, 28, 6144, 16, 8, 128, 151936, True),
    Arch("qwen3-4b", 2560, 36, 9728, 32, 8, 128, 151936, True),
    Arch("qwen3-8b", 4096, 36, 12288, 32, 8, 128, 151936, False),
)


def read_keys(path: Path) -> dict[str, str]:
    """``key: value`` pairs of a flat-ish YAML file (comments dropped; nesting ignored)."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z_]+):\s*([^#\s][^#]*?)\s*(#.*)?$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def settings(a: Arch) -> dict:
    mem, model = read_keys(CONF / "memory" / f"{a.name}-vllm.yaml"), read_keys(CONF / "model" / f"{a.name}.yaml")
    eng = {**read_keys(CONF / "rollout" / "vllm.yaml"), **mem}
    width = int(model["max_prompt_len"]) + int(model["max_new_tokens"])
    batched = eng["max_num_batched_tokens"]
    return {"tokens": int(mem["micro_batch_tokens"]), "util": float(mem["gpu_memory_utilization"]),
            "sleep": mem["enable_sleep_mode"] == "true", "width": width,
            "batched": int(eng["max_num_seqs"]) * width if batched == "null" else int(batched)}


def components(a: Arch, s: dict, n: int) -> dict[str, float]:
    p, t = a.params, s["tokens"]
    biggest = max(a.embed, a.layer_params)  # the embedding (tied: with the LM head); untied head is the same size
    c = {"weights": 4 * p / n, "grads": 4 * p / n, "adam": 8 * p / n, "ref": 2 * p / n,
         "gathered": 0.0 if n == 1 else 2 * 4 * (biggest + a.layer_params)}
    boundary = 4 * t * a.hidden * a.layers
    layer = 2 * t * a.act_bytes_per_token() + 2 * a.layer_params  # + the layer's bf16 weight casts
    head = 3 * 4 * t * a.hidden + 5 * 4 * LOGITS_CHUNK
    c["acts"] = boundary + layer + t * s["width"] + head
    c["step"] = 4 * p / n
    c["resident"] = c["weights"] + c["grads"] + c["adam"] + c["ref"]
    c["train_trainer"] = c["resident"] + max(c["gathered"] + c["acts"], c["step"])
    return {k: v / GB for k, v in c.items()}


def totals(a: Arch, s: dict, c: dict, cap: float) -> dict:
    """Training and generating totals on a ``cap`` GB GPU, and the largest vLLM share that would fit there."""
    vllm = s["util"] * cap
    train = c["train_trainer"] + (0.0 if s["sleep"] else vllm)
    gen = c["resident"] + vllm
    fits = train <= cap and gen <= cap and kv_tokens(a, vllm) >= s["width"]
    free = cap - (c["resident"] if s["sleep"] else c["train_trainer"])
    best = min(0.95, free / cap)
    ok = (not s["sleep"] or c["train_trainer"] <= cap) and kv_tokens(a, best * cap) >= s["width"]
    return {"train": train, "gen": gen, "fits": fits, "best": best if ok else None}


def kv_tokens(a: Arch, share_gb: float) -> float:
    """Tokens of KV cache in a vLLM share of ``share_gb`` GB after its bf16 weights (vLLM's workspace not counted)."""
    return (share_gb * GB - 2 * a.params) / a.kv_bytes_per_token


def main() -> None:
    print("### Models and settings (conf/memory/<model>-vllm.yaml)\n")
    print("| model | params | per layer | embedding | tied | micro-batch tokens | KV cache / token | vLLM share | "
          "sleep mode | KV cache tokens, 80 GB | KV cache tokens, 141 GB | vLLM batched tokens | its profile peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for a in ARCHS:
        s = settings(a)
        kv = [max(0.0, kv_tokens(a, s["util"] * cap)) / 1e3 for cap in CAPACITIES]
        print(f"| {a.name} | {a.params / 1e9:.3f} B | {a.layer_params / 1e6:.1f} M | {a.embed / 1e6:.1f} M | "
              f"{'yes' if a.tied else 'no'} | {s['tokens']:,} | {a.kv_bytes_per_token / 1024:.0f} KiB | "
              f"{s['util']} | {'on' if s['sleep'] else 'off'} | {kv[0]:,.0f}k | {kv[1]:,.0f}k | {s['batched']:,} | "
              f"{2 * (2 * a.hidden + 3 * a.inter) * s['batched'] / GB:.0f} GB |")
    print("\n### Trainer per GPU (GB)\n")
    print("| model | GPUs | fp32 weights | fp32 grads | AdamW | bf16 ref | gathered units | activations | "
          "AdamW step temp | trainer peak | trainer while generating |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for a in ARCHS:
        s = settings(a)
        for n in GPUS:
            c = components(a, s, n)
            print(f"| {a.name} | {n} | " + " | ".join(f"{c[k]:.1f}" for k in (
                "weights", "grads", "adam", "ref", "gathered", "acts", "step", "train_trainer", "resident")) + " |")
    print("\n### Totals per GPU (GB), vLLM share as configured\n")
    print("| model | GPUs | " + " | ".join(f"training, {g} GB | generating, {g} GB | fits {g} GB" for g in CAPACITIES)
          + " |")
    print("|---|---|" + "---|---|---|" * len(CAPACITIES))
    for a in ARCHS:
        s = settings(a)
        for n in GPUS:
            cells = []
            for cap in CAPACITIES:
                t = totals(a, s, components(a, s, n), cap)
                fit = "no" if t["best"] is None else f"share ≤ {t['best']:.2f} only"
                if t["fits"]:
                    fit = f"yes (share ≤ {t['best']:.2f})"
                cells += [f"{t['train']:.1f}", f"{t['gen']:.1f}", fit]
            print(f"| {a.name} | {n} | " + " | ".join(cells) + " |")
    print("\nfits: training and generating totals within the capacity, and a KV cache of at least one full sequence;")
    print("share: the largest `rollout.gpu_memory_utilization` that would fit (capped at 0.95).")
    print("vLLM's profile peak (its dummy forward of `max_num_batched_tokens` tokens, ≈ (2h + 3i) x 2 B a token,")
    print("reserved inside its share) is not in the KV cache tokens or the totals.")


if __name__ == "__main__":
    main()
