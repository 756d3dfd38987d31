"""The GRPO loop: plain Python components in, metrics out. No Hydra here.

One step reads like the algorithm (architecture.md):
sample prompts → allocate rollouts → generate (ragged) → reward → group advantages →
loss weights → clipped-surrogate update → controller updates → log.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gdro.advantages import group_advantages
from gdro.checkpoint import (
    CKPT_ROOT,
    FINAL_DIR,
    FINAL_MARKER,
    CheckpointConfig,
    atomic_dir,
    clear_leftovers,
    final_step,
    load_checkpoint,
    read_meta,
    rng_state,
    save_checkpoint,
    set_rng_state,
    step_dirname,
)
from gdro.data.synthetic import Problem
from gdro.distributed import Dist, StateView, full_state_dict, shard_groups
from gdro.evaluation import EvalConfig, evaluate
from gdro.interfaces import (
    DifficultyClassifier,
    MetricLogger,
    PromptPool,
    PromptSampler,
    Reward,
    RolloutAllocator,
    StepFeedback,
)
from gdro.ioerrors import named_io
from gdro.loss import LossConfig
from gdro.policy import OptimConfig, ppo_update
from gdro.rollout.base import Generator, RolloutBatch, SamplingParams, concat_rollouts
from gdro.rundir import held
from gdro.tracking import RunRecord

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunConfig:
    """Top-level run settings (conf/train.yaml)."""

    seed: int = 0
    steps: int = 150
    prompts_per_step: int = 32
    rollouts_per_prompt: int = 8  # n̄: the mean rollout budget per prompt
    threads: int | None = None  # torch intra-op threads (None = torch's default)
    device: str = "auto"  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N: model, reference, engine, batches
    save_final: bool = True  # save the final policy to <run_dir>/checkpoint
    progress: bool = True
    resume: bool = True  # resume from the run dir's latest checkpoint; False refuses a dir that holds one
    label: str | None = None  # this run's row name in gdro-report (None: its sampler+allocator)

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.seed >= 2**63:
            raise ValueError(f"seed must be < 2**63, got {self.seed}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1, got {self.prompts_per_step}")
        if self.rollouts_per_prompt < 1:
            raise ValueError(f"rollouts_per_prompt must be >= 1, got {self.rollouts_per_prompt}")
        if self.label is not None and not (isinstance(self.label, str) and self.label.strip()):
            raise ValueError(f"label must be a non-empty name or null, got {self.label!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 or null, got {self.threads}")
        # a bad or unavailable device fails here, before any model loads
        from gdro.models import resolve_device

        resolve_device(self.device)


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for (run seed, purpose, step...) — independent streams, no Python hash()."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


STREAM_SAMPLER, STREAM_ROLLOUT, STREAM_UPDATE = 1, 2, 3


class StopRequest:
    """Graceful stop on SIGTERM / SIGINT: the handler only records the signal; the trainer finishes the current
    step, saves a checkpoint and raises :class:`Interrupted`. A second SIGINT stops at once (KeyboardInterrupt)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: stopping after the current step (with a checkpoint)", signal.Signals(signum).name)

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Route SIGTERM and SIGINT to this request while the body runs (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class Interrupted(Exception):
    """Training stopped on a signal after ``step`` (``checkpoint``: where it was saved, None if no step ran)."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        where = f"checkpoint {checkpoint}" if checkpoint else "no new checkpoint"
        super().__init__(f"interrupted by {signal.Signals(signum).name} after step {step} ({where})")


@dataclass
class Trainer:
    run: RunConfig
    policy: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    engine: Generator
    reward: Reward
    sampler: PromptSampler
    allocator: RolloutAllocator
    classifier: DifficultyClassifier
    train_problems: Sequence[Problem]
    test_problems: Sequence[Problem]
    loss_cfg: LossConfig
    optim_cfg: OptimConfig
    eval_cfg: EvalConfig
    train_sampling: SamplingParams
    logger: MetricLogger
    run_dir: Path
    ref_model: torch.nn.Module | None = None
    ckpt_cfg: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume_from: Path | None = None  # a checkpoint dir to continue from
    record: RunRecord | None = None  # run.json: last_step is kept current at each checkpoint
    stop: StopRequest | None = None
    config: dict[str, Any] | None = None  # the resolved config, stored with each checkpoint
    dist: Dist = field(default_factory=Dist)  # this process's rank among the run's processes (gdro.distributed)
    _began: bool = field(default=False, init=False, repr=False)  # this attempt has changed the run dir (fit)

    def fit(self) -> list[dict[str, Any]]:
        """Train for ``run.steps`` steps (from the checkpoint in ``resume_from``, if any); returns the logged rows.

        ``run.json`` follows the run: ``running`` from the moment this attempt changes the run dir (so a rerun that
        stops before -- nothing to do, or an error while restoring -- leaves the record as it was, e.g.
        ``completed``), then ``completed``, ``interrupted`` (a signal: the checkpoint was saved; or a second Ctrl-C:
        stopped at once) or ``failed`` (with the error). A record the disk cannot take is left to the next start.
        """
        self._began = False
        try:
            rows = self._fit()
        except Interrupted as stop:
            self._mark(status="interrupted", interrupted_by=signal.Signals(stop.signum).name)
            raise
        except KeyboardInterrupt:
            self._mark(status="interrupted", interrupted_by="SIGINT (a second Ctrl-C: stopped at once)")
            raise
        except BaseException as err:
            self._mark(status="failed", error=f"{type(err).__name__}: {err}"[:2000])
            raise
        if not self._began and self.record is not None and self.record.data.get("status") != "completed":
            self._begin(self.run.steps)  # nothing left to do, but the record never said it completed
        self._mark(status="completed", last_step=self.run.steps)
        return rows

    def _begin(self, step: int) -> None:
        """This attempt is about to change the run dir: run.json says ``running`` from here on (and holds what an
        earlier attempt left in the lock because its disk was full)."""
        if self.record is not None and not self._began:
            self.record.begin(last_step=step)
            lock = held(self.run_dir)
            if lock is not None:
                lock.settle()
        self._began = True

    def _mark(self, **fields: Any) -> None:
        """Record how this attempt ended, if it began. A full disk: the fields wait in the run dir's lock (written
        in place), and the next start records them."""
        if self.record is None or not self._began:
            return
        try:
            self.record.update(**fields)
        except OSError as err:
            log.warning("run.json not updated (%s): the next start will record how this attempt ended", err)
            lock = held(self.run_dir)
            if lock is not None:
                lock.defer(fields)

    def _fit(self) -> list[dict[str, Any]]:
        run, rows = self.run, []
        rngs = {
            "sampler": np.random.default_rng(derive_seed(run.seed, STREAM_SAMPLER)),
            "update": np.random.default_rng(derive_seed(run.seed, STREAM_UPDATE)),
        }
        rng_sampler, rng_update = rngs["sampler"], rngs["update"]
        optimizer, scheduler = self.optim_cfg.make(self.policy.parameters())
        pad_id = self.engine.pad_id
        # what each controller may see of the pool: uids; the generator's labels only for the oracle control
        uids = tuple(p.uid for p in self.train_problems)
        self.classifier.bind(PromptPool(uids))
        levels = tuple(p.level for p in self.train_problems) if self.sampler.reads_labels else None
        self.sampler.bind(PromptPool(uids, levels), self.classifier.bin_spec())
        self.allocator.bind(self.classifier.bin_spec())
        max_new = self.train_sampling.max_new_tokens
        start = 0
        if self.resume_from is not None:
            start = self._restore(self.resume_from, optimizer, scheduler, rngs)
            log.info("resumed from %s (step %d of %d)", self.resume_from, start, run.steps)
        if start >= run.steps:
            if not run.save_final or final_step(self.run_dir) == run.steps:
                if self.dist.main:
                    clear_leftovers(self.run_dir / FINAL_DIR)  # a kill right after the final save's swap
                log.info("nothing to do: the run is at step %d of %d", start, run.steps)
                return rows
            log.info("the run is at step %d of %d; finishing its final save", start, run.steps)  # a cut one
            self._begin(start)
            self.save(self.run_dir / FINAL_DIR)
            return rows
        self._begin(start)
        self._check_stop(start, None)  # a signal during set-up: stop before any step
        if start == 0 and self.eval_cfg.at_start:
            rows.append(self._log({"step": 0, **self._evaluate()}))
        bar = tqdm(range(start + 1, run.steps + 1), desc="gdro-train", disable=not run.progress, dynamic_ncols=True,
                   initial=start, total=run.steps)
        for step in bar:
            t0 = time.perf_counter()
            # 1. which prompts; their difficulty bins from history up to step-1; rollouts per prompt (ragged)
            ids = self.sampler.sample(run.prompts_per_step, rng_sampler, self.classifier)
            bins = self.classifier.bins(ids)
            n = self.allocator.allocate(bins, budget=len(ids) * run.rollouts_per_prompt)
            # 2. sample from the current policy (in shards of whole groups when the step is split across processes)
            ids, bins, n, bounds = self._shard_order(ids, bins, n)
            probs = [self.train_problems[i] for i in ids]
            roll = self._generate([p.prompt for p in probs], n, bounds, step)
            local = self._local_rows(roll, bounds)
            t_gen = time.perf_counter() - t0
            tr = time.perf_counter()
            # 3. verifiable reward and GRPO advantages over each prompt's own group (Eq. 3)
            scored = self._score(roll, [probs[g].answer for g in roll.group_index], local)
            rewards = torch.as_tensor(scored.rewards, dtype=torch.float32)
            gidx = torch.as_tensor(roll.group_index)
            adv = group_advantages(
                rewards, gidx, len(probs),
                norm_by_std=self.loss_cfg.norm_adv_by_std, eps=self.loss_cfg.adv_eps, unbiased_std=self.loss_cfg.unbiased_std,
            )
            t_reward = time.perf_counter() - tr
            # 4. the data adversary's multipliers on the advantages (ones for uniform GRPO; Eq. 16), then the update
            tc = time.perf_counter()
            mult = self.sampler.loss_weights(bins, roll.group_index)
            t_ctrl = time.perf_counter() - tc
            t1 = time.perf_counter()
            stats, losses = ppo_update(
                self.policy, optimizer, scheduler, roll, adv * torch.as_tensor(mult, dtype=adv.dtype),
                self.loss_cfg, self.optim_cfg, temperature=self.train_sampling.temperature, pad_id=pad_id,
                rng=rng_update, ref_model=self.ref_model, local_rows=local, dist=self.dist,
            )
            t_upd = time.perf_counter() - t1
            # 5. every controller observes the same step; the surrogate is linear in A, so dividing the weighted
            #    per-response loss by its (positive) multiplier gives the unweighted one, the official signal
            tc = time.perf_counter()
            feedback = StepFeedback(
                ids=ids, bins=bins, n=n, group_index=roll.group_index, correct=scored.correct,
                pg_loss=losses.pg / mult, kl=losses.kl, beta_kl=self.loss_cfg.beta_kl,
            )
            self.sampler.update(feedback)
            self.allocator.update(feedback)
            self.classifier.update(feedback)
            t_ctrl += time.perf_counter() - tc
            ts = time.perf_counter()
            self._sync_engine()
            t_sync = time.perf_counter() - ts
            row = {"step": step, **stats, **self._rollout_metrics(roll, scored, feedback.n_correct, adv, max_new)}
            row.update(self.reward.metrics(scored))
            row.update(self.sampler.metrics())
            row.update(self.allocator.metrics())
            row.update(self.classifier.metrics())
            row.update({"time/gen_s": t_gen, "time/reward_s": t_reward, "time/update_s": t_upd,
                        "time/controller_s": t_ctrl, "time/sync_s": t_sync, "time/step_s": time.perf_counter() - t0})
            if (step == run.steps and self.eval_cfg.at_end) or (self.eval_cfg.every and step % self.eval_cfg.every == 0):
                row.update(self._evaluate())
            rows.append(self._log(row))
            bar.set_postfix({"reward": f"{row['reward/mean']:.3f}", **self._eval_postfix(rows)})
            # 6. checkpoint on schedule, at the end, or when a signal asked us to stop (after this step's row)
            ckpt = None
            if self.ckpt_cfg.due(step, run.steps) or self._stop_requested():
                ckpt = self._save_checkpoint(step, optimizer, scheduler, rngs)
            self._check_stop(step, ckpt)
        bar.close()
        if run.save_final:
            self.save(self.run_dir / FINAL_DIR)
        return rows

    # -- the step split across processes (gdro.distributed; one process: shards=1 changes nothing) ---------------
    def _shard_order(self, ids, bins, n):
        """The step's prompts reordered shard by shard (whole groups, balanced by rollouts) and the shard bounds
        (``bounds[s]:bounds[s+1]`` are shard ``s``'s prompts). One shard: the order as sampled."""
        k = self.dist.shards
        if k == 1:
            return ids, bins, n, [0, len(ids)]
        parts = shard_groups(n, k)
        order = np.concatenate(parts)
        bounds = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).tolist()
        reorder = (lambda x: x[order]) if isinstance(ids, np.ndarray) else (lambda x: [x[i] for i in order])
        return reorder(ids), np.asarray(bins)[order], np.asarray(n)[order], bounds

    def _generate(self, prompts: list[str], n, bounds: list[int], step: int) -> RolloutBatch:
        """One shard: the whole batch with the step's seed. Several: this process's shards, each with its own seed,
        then every process's shards gathered in shard order, so every process holds the same whole batch."""
        run, sampling = self.run, self.train_sampling
        if self.dist.shards == 1:
            return self.engine.generate(prompts, n, seed=derive_seed(run.seed, STREAM_ROLLOUT, step), sampling=sampling)
        mine = [self.engine.generate(prompts[bounds[s]:bounds[s + 1]], n[bounds[s]:bounds[s + 1]],
                                     seed=derive_seed(run.seed, STREAM_ROLLOUT, step, s), sampling=sampling)
                for s in self.dist.my_shards()]
        return concat_rollouts([b for per_rank in self.dist.all_gather_object(mine) for b in per_rank])

    def _local_rows(self, roll: RolloutBatch, bounds: list[int]) -> np.ndarray | None:
        """The rows this process trains on (its shards' groups); None in one process (every row)."""
        if not self.dist.active:
            return None
        mine = self.dist.my_shards()
        lo, hi = bounds[mine[0]], bounds[mine[-1] + 1]
        return np.flatnonzero((roll.group_index >= lo) & (roll.group_index < hi))

    def _score(self, roll: RolloutBatch, golds: list[str], local: np.ndarray | None):
        """The step's verdicts. Across processes each scores its own rows and the verdicts are all-gathered: the
        reward's time bound makes a verdict depend on timing, so processes scoring the same row could disagree and
        their controllers drift apart."""
        if local is None:
            return self.reward.score(roll.texts, golds, roll.finished)
        finished = roll.finished
        mine = self.reward.score([roll.texts[i] for i in local], [golds[i] for i in local], finished[local])
        rewards, correct = np.zeros(len(roll), dtype=np.float64), np.zeros(len(roll), dtype=bool)
        counts: dict[str, int] = {}
        for rows, batch in self.dist.all_gather_object((local, mine)):
            rewards[rows], correct[rows] = batch.rewards, batch.correct
            for f in dataclasses.fields(batch):
                if f.name.startswith("n_"):
                    counts[f.name] = counts.get(f.name, 0) + int(getattr(batch, f.name))
        return dataclasses.replace(mine, rewards=rewards, correct=correct, **counts)

    def _sync_engine(self) -> None:
        """The engine samples from the updated policy: the policy itself (HF, one process), or its full weights
        (vLLM; HF across processes, where the engine holds its own unsharded copy)."""
        if self.dist.active:
            self.engine.sync_weights(StateView(full_state_dict(self.policy, self.dist)))
        else:
            self.engine.sync_weights(self.policy)

    def _stop_requested(self) -> bool:
        """A signal on any process stops every process after the same step (so that all save the checkpoint)."""
        local = self.stop is not None and self.stop.requested
        return bool(self.dist.max_int(int(local))) if self.dist.active else local

    def _check_stop(self, step: int, ckpt: Path | None) -> None:
        if self._stop_requested():
            raise Interrupted(self.stop.signum if self.stop is not None and self.stop.requested else signal.SIGTERM,
                              step, ckpt)

    def _save_checkpoint(self, step: int, optimizer, scheduler, rngs: dict[str, np.random.Generator]) -> Path:
        """Everything the next step depends on, written atomically after the step's metrics row."""
        position = self.logger.position()
        policy_state, optim_state = self._full_states(optimizer)  # every process takes part (FSDP)
        path = self.run_dir / CKPT_ROOT / step_dirname(step)
        if self.dist.main:
            files = {
                "policy": policy_state,
                "optimizer": {"optimizer": optim_state, "scheduler": scheduler.state_dict()},
                "trainer": {
                    "step": step, "sampler": self.sampler.state_dict(), "classifier": self.classifier.state_dict(),
                    "allocator": self.allocator.state_dict(), "rng": rng_state(rngs),
                    "world_size": self.dist.world,
                },
            }
            meta = {"config": self.config, "metrics_bytes": position, "world_size": self.dist.world}
            path = save_checkpoint(self.run_dir, step, files, meta, keep=self.ckpt_cfg.keep)
            if self.record is not None:
                self.record.update(last_step=step, last_checkpoint=str(path.relative_to(self.run_dir)))
        self.dist.barrier()  # the checkpoint exists before any process goes on (or stops)
        return path

    def _full_states(self, optimizer) -> tuple[dict, dict]:
        """The policy's and the optimiser's state dicts, whole: as they are in one process; under FSDP gathered to
        rank 0 in host memory (keyed by parameter name), empty on the other ranks."""
        if not self.dist.active:
            return self.policy.state_dict(), optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (full_state_dict(self.policy, self.dist, rank0_only=True),
                get_optimizer_state_dict(self.policy, optimizer, options=opts))

    def _restore(self, ckpt: Path, optimizer, scheduler, rngs: dict[str, np.random.Generator]) -> int:
        """Load a checkpoint into the bound components; returns its step."""
        state = load_checkpoint(ckpt, ("policy", "optimizer", "trainer"))
        tr = state["trainer"]
        saved_world = int(tr.get("world_size", 1))
        if saved_world != self.dist.world:
            raise ValueError(f"{ckpt} was written by {saved_world} process(es); resume it with the same number "
                             f"(this run has {self.dist.world})")
        if self.dist.active:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
                set_optimizer_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True)
            set_model_state_dict(self.policy, state["policy"], options=opts)
            set_optimizer_state_dict(self.policy, optimizer, state["optimizer"]["optimizer"], options=opts)
        else:
            self.policy.load_state_dict(state["policy"])
            optimizer.load_state_dict(state["optimizer"]["optimizer"])
        scheduler.load_state_dict(state["optimizer"]["scheduler"])
        self.sampler.load_state_dict(tr["sampler"])
        self.classifier.load_state_dict(tr["classifier"])
        self.allocator.load_state_dict(tr["allocator"])
        set_rng_state(tr["rng"], rngs)
        self._sync_engine()
        step = int(tr["step"])
        meta_step = int(read_meta(ckpt)["step"])
        if step != meta_step:
            raise ValueError(f"{ckpt}: trainer state is at step {step}, meta.json says {meta_step}")
        return step

    def _evaluate(self) -> dict[str, float]:
        if not self.dist.main:  # the engine holds its own copy of the weights: no collective, rank 0 evaluates
            return {}
        t0 = time.perf_counter()
        out = evaluate(self.engine, self.test_problems, self.reward, self.eval_cfg, self.train_sampling.max_new_tokens)
        out["time/eval_s"] = time.perf_counter() - t0
        return out

    @staticmethod
    def _rollout_metrics(roll, scored, n_correct: np.ndarray, adv: torch.Tensor, max_new: int) -> dict[str, float]:
        sizes = roll.group_sizes
        g_mean = n_correct / np.maximum(sizes, 1)
        return {
            "reward/mean": float(scored.rewards.mean()),
            "reward/std": float(scored.rewards.std()),
            "rollout/len_mean": float(roll.lengths.mean()),
            "rollout/len_max": float(roll.lengths.max()),
            "rollout/n_total": float(len(roll)),
            "rollout/n_prompts": float(len(sizes)),
            "rollout/n_per_prompt_mean": float(sizes.mean()),
            "rollout/clip_len_frac": float((roll.lengths >= max_new).mean()),
            "rollout/solved_frac": float((g_mean == 1).mean()),
            "rollout/unsolved_frac": float((g_mean == 0).mean()),
            "train/adv_abs_mean": float(adv.abs().mean()),
        }

    @staticmethod
    def _eval_postfix(rows: list[dict[str, Any]]) -> dict[str, str]:
        for r in reversed(rows):
            for k, v in r.items():
                if k.startswith("eval/mean@") and "/level_" not in k:
                    return {k.removeprefix("eval/"): f"{v:.1f}"}
        return {}

    def _log(self, row: dict[str, Any]) -> dict[str, Any]:
        return self.logger.log(row)

    def save(self, path: Path) -> None:
        """The final policy as a HF checkpoint (loadable by ``model.name_or_path=<path>``), in the compute dtype
        (``model.dtype``; fp32 master weights are cast down, as the base checkpoint was stored). Written like the
        training checkpoints (gdro.checkpoint.atomic_dir), with a marker naming the step it holds, so a kill at any
        moment leaves the previous one or the new one, and a rerun finishes a save that was cut."""
        from gdro.models import compute_dtype

        dt = compute_dtype(self.policy)
        full = full_state_dict(self.policy, self.dist, rank0_only=True)  # every process takes part (FSDP)
        if not self.dist.main:
            return
        state = None
        if self.dist.active or any(t.is_floating_point() and t.dtype != dt for t in full.values()):
            # a gathered state dict holds tied weights twice (lm_head = embedding): keep the first name, as HF does
            seen, tied = set(), set()
            for name, p in self.policy.named_parameters(remove_duplicate=False):
                (tied if id(p) in seen else seen).add(name if id(p) in seen else id(p))
            state = {k: t.to(dt) if t.is_floating_point() else t for k, t in full.items() if k not in tied}
        with atomic_dir(path) as tmp:
            with named_io(tmp):
                self.policy.save_pretrained(tmp, safe_serialization=True, state_dict=state)
                self.tokenizer.save_pretrained(tmp)
            (tmp / FINAL_MARKER).write_text(json.dumps({"step": self.run.steps}), encoding="utf-8")
