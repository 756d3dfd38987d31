"""A minimal plain-torch GRPO loop on SmolLM2-135M-Instruct (the pilot of docs/smollm2-pilots.md).

    python experiments/smollm2-pilots/grpo.py --task add --levels 1 2 --reward any --minutes 20 --out outputs/pilots/grpo-add

Per step: ``--prompts`` fresh training problems (levels uniform over ``--levels``), ``--group`` samples each at
T=``--temperature`` (top_k off, top_p 1) from a bf16 copy of the policy, reward 1/0, group-normalised advantages
(r - mean) / (std + 1e-4), one on-policy update (ratio 1, so PPO clipping is inactive; no KL, beta 0), loss
averaged over all completion tokens of the batch (token-mean), AdamW on fp32 master weights under bf16 autocast.
Only the rows with a non-zero advantage are forwarded (an exact speed-up: the denominator stays the full count).

Reward (``--reward``): ``boxed`` = gdro's default (last \\boxed{} equals the gold, and the end token emitted);
``any`` = the last integer of the completion equals the gold, and the end token emitted (close to gdro's
``answer_mode=any``, which reads math-verify's expression extraction). Held-out evaluation (fixed problems and
sampling seed, ``--eval-per-level`` per level) at the start, every ``--eval-every`` steps and at the end, with
gdro's eval sampling (T 0.6, top-p 0.8, top-k 20) by default; it reports the format rate (a \\boxed{} present),
the end-token rate, and accuracy under both rewards, per level. One JSON line per step / evaluation on stdout
and in ``<out>/log.jsonl``.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
from common import chat_ids, heldout, left_pad, load, load_avg, make_items, sample, score


def rewards_of(kind: str, texts: list[str], golds: list[str], fins: list[bool]) -> np.ndarray:
    if kind == "mv-any":  # gdro's own reward with answer_mode=any (math-verify; run with PYTHONPATH=<repo root>)
        from gdro.grading.reward_config import RewardConfig
        from gdro.grading.rewards import MathVerifyReward

        return MathVerifyReward(RewardConfig(answer_mode="any")).score(texts, golds, fins).rewards.astype(float)
    sc = [score(t, g, f) for t, g, f in zip(texts, golds, fins)]
    return np.array([float(s["correct"] if kind == "boxed" else (s["correct_any"] and s["finished"])) for s in sc])


def evaluate(gen_model, tok, items, ids, args, step: int, log) -> dict:
    t0 = time.time()
    _, texts, fins, _ = sample(gen_model, tok, ids, max_new=args.max_new, temperature=args.eval_temperature,
                               top_p=args.eval_top_p, top_k=args.eval_top_k, batch=64, seed=args.eval_seed)
    rows = [dict(score(t, it.gold, f), level=it.level) for it, t, f in zip(items, texts, fins)]
    if args.reward == "mv-any":
        mv = rewards_of("mv-any", texts, [it.gold for it in items], fins)
        for row, v in zip(rows, mv):
            row["mv_any"] = bool(v)
    with (Path(args.out) / f"eval_{step:04d}.jsonl").open("w") as fh:
        for it, t, f, row in zip(items, texts, fins, rows):
            fh.write(json.dumps({"prompt": it.prompt, "gold": it.gold, "level": it.level, "finished": f, "text": t,
                                 **row}) + "\n")
    out = {"eval_step": step}
    for lv in [*args.levels, "all"]:
        rs = [r for r in rows if lv == "all" or r["level"] == lv]
        out[f"L{lv}"] = {k: round(100 * float(np.mean([r[k] for r in rs])), 1)
                         for k in ("boxed", "finished", "correct", "correct_any", "mv_any") if k in rs[0]} | {
            "any_eos": round(100 * float(np.mean([r["correct_any"] and r["finished"] for r in rs])), 1), "n": len(rs)}
    out["eval_s"] = round(time.time() - t0, 1)
    log(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="add")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reward", choices=("boxed", "any", "mv-any"), default="any")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=20.0, help="stop starting new steps after this much time")
    ap.add_argument("--max-steps", type=int, default=10_000)
    ap.add_argument("--eval-every", type=int, default=8)
    ap.add_argument("--eval-per-level", type=int, default=64)
    ap.add_argument("--eval-temperature", type=float, default=0.6)
    ap.add_argument("--eval-top-p", type=float, default=0.8)
    ap.add_argument("--eval-top-k", type=int, default=20)
    ap.add_argument("--eval-seed", type=int, default=12345)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/pilots/grpo-pilot")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = (out / "log.jsonl").open("w")

    def log(rec: dict) -> None:
        rec = {"t": round(time.time() - t_start, 1), **rec}
        print(json.dumps(rec), flush=True)
        logf.write(json.dumps(rec) + "\n")
        logf.flush()

    t_start = time.time()
    log({"args": vars(args)})
    policy, tok = load(torch.float32)
    policy.train()
    gen_model = copy.deepcopy(policy).to(torch.bfloat16).eval()
    pad = policy.generation_config.pad_token_id
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0, eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, args.warmup)))

    ev_items = heldout(args.task, args.levels, args.eval_per_level, seed=1234)
    ev_ids = chat_ids(tok, [it.prompt for it in ev_items])
    held = {it.prompt for it in ev_items if it.level > 1}  # L1's tiny space is shared with training (as gdro's copy task)
    rng = np.random.default_rng(10_000 + args.seed)
    evaluate(gen_model, tok, ev_items, ev_ids, args, 0, log)

    step = 0
    while step < args.max_steps and time.time() - t_start < args.minutes * 60:
        step += 1
        t0 = time.time()
        items = []
        while len(items) < args.prompts:
            lv = int(rng.choice(args.levels))
            it = make_items(args.task, lv, 1, rng)[0]
            if it.prompt not in held:
                items.append(it)
        p_ids = chat_ids(tok, [it.prompt for it in items])
        rows = [r for r in p_ids for _ in range(args.group)]
        comps, texts, fins, gen_s = sample(gen_model, tok, rows, max_new=args.max_new, temperature=args.temperature,
                                           batch=len(rows), seed=args.seed * 100_003 + step)
        golds = [it.gold for it in items for _ in range(args.group)]
        r = rewards_of(args.reward, texts, golds, fins).reshape(args.prompts, args.group)
        adv = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-4)
        adv = adv.reshape(-1)
        n_tok = sum(len(c) for c in comps)
        live = [i for i in range(len(rows)) if abs(adv[i]) > 1e-8]
        t1 = time.time()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for s in range(0, len(live), args.micro):
            idx = live[s:s + args.micro]
            P = max(len(rows[i]) for i in idx)
            C = max(len(comps[i]) for i in idx)
            ids, mask = left_pad([rows[i] for i in idx], pad)
            ids, mask = ids[:, -P:], mask[:, -P:]
            comp = torch.full((len(idx), C), pad, dtype=torch.long)
            cmask = torch.zeros((len(idx), C))
            for j, i in enumerate(idx):
                comp[j, :len(comps[i])] = torch.tensor(comps[i])
                cmask[j, :len(comps[i])] = 1
            full = torch.cat([ids, comp], 1)
            fmask = torch.cat([mask, cmask.long()], 1)
            pos = (fmask.cumsum(-1) - 1).clamp(min=0)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = policy(input_ids=full, attention_mask=fmask, position_ids=pos, logits_to_keep=C + 1).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
            a = torch.tensor(adv[idx], dtype=torch.float32).unsqueeze(1)
            loss = -(a * logp * cmask).sum() / n_tok
            loss.backward()
            loss_sum += float(loss.detach())
        gnorm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0))
        opt.step()
        sched.step()
        with torch.no_grad():
            for pg, pp in zip(gen_model.parameters(), policy.parameters()):
                pg.copy_(pp)
        mixed = int(((r.max(1) > 0) & (r.min(1) < 1)).sum())
        sc = [score(t, g, f) for t, g, f in zip(texts, golds, fins)]
        log({"step": step, "reward": round(float(r.mean()), 3), "mixed_groups": mixed,
             "boxed": round(float(np.mean([s["boxed"] for s in sc])), 3),
             "finished": round(float(np.mean(fins)), 3),
             "acc_boxed": round(float(np.mean([s["correct"] for s in sc])), 3),
             "mean_len": round(n_tok / len(rows), 1), "live_rows": len(live), "loss": round(loss_sum, 4),
             "grad_norm": round(gnorm, 3), "gen_s": round(gen_s, 1), "train_s": round(time.time() - t1, 1),
             "step_s": round(time.time() - t0, 1), "load1": round(load_avg(), 2),
             "sample": texts[0][:80]})
        if args.eval_every and step % args.eval_every == 0:
            evaluate(gen_model, tok, ev_items, ev_ids, args, step, log)
    if not args.eval_every or step % args.eval_every:
        evaluate(gen_model, tok, ev_items, ev_ids, args, step, log)
    log({"done": True, "steps": step, "wall_s": round(time.time() - t_start, 1)})


if __name__ == "__main__":
    main()
