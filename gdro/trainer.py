"""The GRPO loop: plain Python components in, metrics out. No Hydra here.

One step reads like the algorithm (:meth:`Trainer._step`; docs/architecture.md):
sample prompts → allocate rollouts → generate (ragged) → reward → group advantages →
loss weights → clipped-surrogate update → controller updates → log.

How a step runs — forward layouts, micro-batches, processes — is the execution layer's (``Forward`` in
gdro.policy, ``Dist`` in gdro.distributed), built by the composition root (gdro.build) and handed in; nothing here
branches on it.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gdro.checkpoint import (
    CKPT_ROOT,
    FINAL_DIR,
    FINAL_MARKER,
    CheckpointConfig,
    atomic_dir,
    clear_leftovers,
    final_step,
    load_checkpoint,
    named_weights_io,
    read_meta,
    rng_state,
    save_checkpoint,
    set_rng_state,
    step_dirname,
)
from gdro.distributed import Dist
from gdro.evaluation import EvalConfig, evaluate
from gdro.interfaces import (
    DifficultyClassifier,
    MetricLogger,
    Problem,
    PromptPool,
    PromptSampler,
    Reward,
    RolloutAllocator,
    StepFeedback,
)
from gdro.ioerrors import named_io
from gdro.loss import LossConfig
from gdro.policy import Forward, OptimConfig, ppo_update
from gdro.rollout.base import Generator, SamplingParams
from gdro.rundir import check_held, held
from gdro.tracking import RunRecord, StepClock

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
        # a bad or unavailable device fails here, before any model loads
        from gdro.models import check_placement

        check_placement(self.threads, self.device)


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
class _State:
    """What a fit carries from step to step besides the components: the optimiser, its schedule, the RNG streams."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    rngs: dict[str, np.random.Generator]
    step: int = 0


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
    forward: Forward  # how the policy's forwards run (layouts, micro-batches, processes): gdro.policy.forward
    ref_model: torch.nn.Module | None = None
    ckpt_cfg: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume_from: Path | None = None  # a checkpoint dir to continue from
    record: RunRecord | None = None  # run.json: last_step is kept current at each checkpoint
    stop: StopRequest | None = None
    config: dict[str, Any] | None = None  # the resolved config, stored with each checkpoint
    _began: bool = field(default=False, init=False, repr=False)  # this attempt has changed the run dir (fit)

    @property
    def dist(self) -> Dist:
        """How the run is spread over processes (gdro.distributed; one process: every call a no-op)."""
        return self.forward.dist

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
            check_held(self.run_dir)  # (each write to the run dir first checks that it is still ours: gdro.rundir)
            self.record.begin(last_step=step)
            lock = held(self.run_dir)
            if lock is not None:
                lock.settle()
        self._began = True

    def _mark(self, **fields: Any) -> None:
        """Record how this attempt ended, if it began. A full disk: the fields wait in the run dir's lock (written
        in place), and the next start records them. Nothing if another process took the run dir over."""
        lock = held(self.run_dir)
        if self.record is None or not self._began or (lock is not None and lock.lost):
            return
        try:
            self.record.update(**fields)
        except OSError as err:
            log.warning("run.json not updated (%s): the next start will record how this attempt ended", err)
            if lock is not None:
                lock.defer(fields)

    def _fit(self) -> list[dict[str, Any]]:
        run, ev, rows = self.run, self.eval_cfg, []
        st = self._start()
        if self._finished(st.step):
            return rows
        self._begin(st.step)
        self._check_stop(st.step, None)  # a signal during set-up: stop before any step
        if st.step == 0 and ev.at_start:
            rows.append(self._log({"step": 0, **self._evaluate()}))
        bar = tqdm(range(st.step + 1, run.steps + 1), desc="gdro-train", disable=not run.progress,
                   dynamic_ncols=True, initial=st.step, total=run.steps)
        for step in bar:
            row = self._step(step, st)
            if (step == run.steps and ev.at_end) or (ev.every and step % ev.every == 0):
                row.update(self._evaluate())
            rows.append(self._log(row))
            bar.set_postfix({"reward": f"{row['reward/mean']:.3f}", **self._eval_postfix(rows)})
            # 6. checkpoint on schedule, at the end, or when a signal asked us to stop (after this step's row)
            ckpt = None
            if self.ckpt_cfg.due(step, run.steps) or self._stop_requested():
                ckpt = self._save_checkpoint(step, st)
            self._check_stop(step, ckpt)
        bar.close()
        if run.save_final:
            self.save(self.run_dir / FINAL_DIR)
        return rows

    def _step(self, step: int, st: _State) -> dict[str, Any]:
        """One GRPO step, as the algorithm reads; returns its metrics row."""
        run, loss, clock = self.run, self.loss_cfg, StepClock()
        with clock("gen_s"):
            # 1. which prompts; their difficulty bins from history up to step-1; rollouts per prompt (ragged)
            ids = self.sampler.sample(run.prompts_per_step, st.rngs["sampler"], self.classifier)
            bins = self.classifier.bins(ids)
            n = self.allocator.allocate(bins, run.rollouts_per_prompt)
            # 2. sample from the current policy (in shards of whole groups when the step is split across processes)
            ids, bins, n, bounds = self.dist.shard_order(ids, bins, n)
            probs = [self.train_problems[i] for i in ids]
            roll, local = self.dist.generate(self.engine, [p.prompt for p in probs], n, bounds,
                                             lambda *shard: derive_seed(run.seed, STREAM_ROLLOUT, step, *shard),
                                             self.train_sampling)
        with clock("reward_s"):
            # 3. verifiable reward and the loss's advantages over each prompt's own group (GRPO: Eq. 3)
            scored = self.dist.score(self.reward, roll, [probs[g].answer for g in roll.group_index], local)
            adv = loss.advantages(torch.as_tensor(scored.rewards, dtype=torch.float32),
                                  torch.as_tensor(roll.group_index), len(probs))
        with clock("controller_s"):
            # 4. the data adversary's multipliers on the advantages (ones for uniform GRPO; Eq. 16), then the update
            mult = self.sampler.loss_weights(bins, roll.group_index)
        with clock("update_s"):
            stats, losses = ppo_update(self.policy, st.optimizer, st.scheduler, roll,
                                       adv * torch.as_tensor(mult, dtype=adv.dtype), loss, self.optim_cfg,
                                       self.forward, rng=st.rngs["update"], ref_model=self.ref_model, local_rows=local)
        with clock("controller_s"):
            # 5. every controller observes the same step; the surrogate is linear in A, so dividing the weighted
            #    per-response loss by its (positive) multiplier gives the unweighted one, the official signal
            feedback = StepFeedback(ids=ids, bins=bins, n=n, group_index=roll.group_index, correct=scored.correct,
                                    pg_loss=losses.pg / mult, kl=losses.kl, beta_kl=loss.beta_kl)
            for part in self.controllers:
                part.update(feedback)
        with clock("sync_s"):
            self.dist.sync_engine(self.engine, self.policy)
        row = {"step": step, **stats, **rollout_metrics(roll, scored, feedback.n_correct, adv,
                                                        self.train_sampling.max_new_tokens)}
        row.update(self.reward.metrics(scored))
        for part in self.controllers:
            row.update(part.metrics())
        return row | clock.metrics()

    @property
    def controllers(self) -> tuple[PromptSampler, RolloutAllocator, DifficultyClassifier]:
        """The step's controllers, in the order they observe it and report."""
        return self.sampler, self.allocator, self.classifier

    def _start(self) -> _State:
        """The optimiser, its schedule and the RNG streams; the controllers bound to the pool; a resume applied."""
        rngs = {
            "sampler": np.random.default_rng(derive_seed(self.run.seed, STREAM_SAMPLER)),
            "update": np.random.default_rng(derive_seed(self.run.seed, STREAM_UPDATE)),
        }
        optimizer, scheduler = self.optim_cfg.make(self.policy.parameters())
        # what each controller may see of the pool: uids; the generator's labels only for the oracle control
        uids = tuple(p.uid for p in self.train_problems)
        self.classifier.bind(PromptPool(uids))
        levels = tuple(p.level for p in self.train_problems) if self.sampler.reads_labels else None
        self.sampler.bind(PromptPool(uids, levels), self.classifier.bin_spec())
        self.allocator.bind(self.classifier.bin_spec())
        st = _State(optimizer, scheduler, rngs)
        if self.resume_from is not None:
            st.step = self._restore(self.resume_from, st)
            log.info("resumed from %s (step %d of %d)", self.resume_from, st.step, self.run.steps)
        return st

    def _stop_requested(self) -> bool:
        """A signal on any process stops every process after the same step (so that all save the checkpoint)."""
        return self.dist.stop_requested(self.stop is not None and self.stop.requested)

    def _check_stop(self, step: int, ckpt: Path | None) -> None:
        if self._stop_requested():
            raise Interrupted(self.stop.signum if self.stop is not None and self.stop.requested else signal.SIGTERM,
                              step, ckpt)

    def _save_checkpoint(self, step: int, st: _State) -> Path:
        """Everything the next step depends on, written atomically after the step's metrics row."""
        position = self.logger.position()
        policy_state, optim_state = self.dist.full_states(self.policy, st.optimizer)  # every process takes part
        path = self.run_dir / CKPT_ROOT / step_dirname(step)
        if self.dist.main:  # one process writes
            files = {
                "policy": policy_state,
                "optimizer": {"optimizer": optim_state, "scheduler": st.scheduler.state_dict()},
                "trainer": {
                    "step": step, "sampler": self.sampler.state_dict(), "classifier": self.classifier.state_dict(),
                    "allocator": self.allocator.state_dict(), "rng": rng_state(st.rngs),
                    "world_size": self.dist.world,
                },
            }
            meta = {"config": self.config, "metrics_bytes": position, "world_size": self.dist.world}
            check_held(self.run_dir)
            path = save_checkpoint(self.run_dir, step, files, meta, keep=self.ckpt_cfg.keep)
            if self.record is not None:
                self.record.update(last_step=step, last_checkpoint=str(path.relative_to(self.run_dir)))
        self.dist.barrier()  # the checkpoint exists before any process goes on (or stops)
        return path

    def _restore(self, ckpt: Path, st: _State) -> int:
        """Load a checkpoint into the bound components; returns its step."""
        state = load_checkpoint(ckpt, ("policy", "optimizer", "trainer"))
        tr = state["trainer"]
        self.dist.check_resume(int(tr.get("world_size", 1)), ckpt)
        self.dist.load_states(self.policy, st.optimizer, state["policy"], state["optimizer"]["optimizer"])
        st.scheduler.load_state_dict(state["optimizer"]["scheduler"])
        self.sampler.load_state_dict(tr["sampler"])
        self.classifier.load_state_dict(tr["classifier"])
        self.allocator.load_state_dict(tr["allocator"])
        set_rng_state(tr["rng"], st.rngs)
        self.dist.sync_engine(self.engine, self.policy)
        step = int(tr["step"])
        meta_step = int(read_meta(ckpt)["step"])
        if step != meta_step:
            raise ValueError(f"{ckpt}: trainer state is at step {step}, meta.json says {meta_step}")
        return step

    def _evaluate(self) -> dict[str, float]:
        """Held-out evaluation on the main process (the engine holds its own copy of the weights: no collective)."""
        return self.dist.main_only(self._evaluate_here, default={})

    def _evaluate_here(self) -> dict[str, float]:
        clock = StepClock()
        out = evaluate(self.engine, self.test_problems, self.reward, self.eval_cfg, self.train_sampling.max_new_tokens)
        out["time/eval_s"] = clock.elapsed()
        return out

    @staticmethod
    def _eval_postfix(rows: list[dict[str, Any]]) -> dict[str, str]:
        for r in reversed(rows):
            for k, v in r.items():
                if k.startswith("eval/mean@") and "/level_" not in k:
                    return {k.removeprefix("eval/"): f"{v:.1f}"}
        return {}

    def _log(self, row: dict[str, Any]) -> dict[str, Any]:
        check_held(self.run_dir)
        return self.logger.log(row)

    def save(self, path: Path) -> None:
        """The final policy as a HF checkpoint (loadable by ``model.name_or_path=<path>``), in the compute dtype
        (``model.dtype``; fp32 master weights are cast down, as the base checkpoint was stored). Written like the
        training checkpoints (gdro.checkpoint.atomic_dir), with a marker naming the step it holds, so a kill at any
        moment leaves the previous one or the new one, and a rerun finishes a save that was cut."""
        from gdro.models import compute_dtype

        state = self.dist.savable_state(self.policy, compute_dtype(self.policy))  # every process takes part (FSDP)
        if not self.dist.main:  # one process writes
            return
        check_held(self.run_dir)
        with atomic_dir(path) as tmp:
            with named_io(tmp), named_weights_io(tmp):  # a full disk in the weights: a SafetensorError
                self.policy.save_pretrained(tmp, safe_serialization=True, state_dict=state)
                self.tokenizer.save_pretrained(tmp)
            check_held(self.run_dir)  # again before it is put in place: the weights may take minutes
            with named_io(tmp / FINAL_MARKER):
                (tmp / FINAL_MARKER).write_text(json.dumps({"step": self.run.steps}), encoding="utf-8")

    def _finished(self, step: int) -> bool:
        """Whether a resumed run has nothing left to do; a final save that was cut is finished here first."""
        run = self.run
        if step < run.steps:
            return False
        if not run.save_final or final_step(self.run_dir) == run.steps:
            if self.dist.main:
                clear_leftovers(self.run_dir / FINAL_DIR)  # a kill right after the final save's swap
            log.info("nothing to do: the run is at step %d of %d", step, run.steps)
            return True
        log.info("the run is at step %d of %d; finishing its final save", step, run.steps)  # a cut one
        self._begin(step)
        self.save(self.run_dir / FINAL_DIR)
        return True


def rollout_metrics(roll, scored, n_correct: np.ndarray, adv: torch.Tensor, max_new: int) -> dict[str, float]:
    """The step's reward, rollout and advantage summaries."""
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
