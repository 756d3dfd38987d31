"""The GRPO algorithm: plain Python components in, one metrics row per step out. No Hydra, no run dir here.

One step reads like the algorithm (:meth:`Trainer._step`; docs/architecture.md): sample prompts → allocate rollouts →
generate (ragged) → reward → group advantages → loss weights → clipped-surrogate update → controller updates → log.
The run around it (run dir, lock, run.json, checkpoints, resume, signals, the final save) is gdro.run.lifecycle.Run's, which
drives the loop and checkpoints the algorithm through :meth:`Trainer.state_dict`. How a step runs (forward layouts,
micro-batches, processes) is the execution layer's (``Forward``, ``Dist``), handed in; nothing here branches on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gdro.controllers.ledger import ComputeLedger, rollout_metrics
from gdro.evaluation.heldout import EvalConfig, evaluate
from gdro.filters import Drawn, Filter, NoFilter
from gdro.interfaces import Controllers, Problems, PromptPool, Reward, StepFeedback
from gdro.loss import Loss
from gdro.models.loading import Policy
from gdro.policy import Forward, OptimConfig, ppo_update
from gdro.rollout.base import SamplingParams
from gdro.run import seeding
from gdro.run.samples import ROW_KEYS, SampleConfig, train_records
from gdro.run.seeding import derive_seed, rng_state, set_rng_state
from gdro.run.tracking import StepClock


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
    samples: SampleConfig = field(default_factory=SampleConfig)  # completions shown (samples/, W&B; gdro.run.samples)

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
        object.__setattr__(self, "samples", SampleConfig.of(self.samples))
        # a bad or unavailable device fails here, before any model loads
        from gdro.models.loading import check_placement

        check_placement(self.threads, self.device)


@dataclass
class _State:
    """What the algorithm carries from step to step: optimiser, schedule, RNG streams, last step, compute ledger."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    rngs: dict[str, np.random.Generator]
    step: int = 0
    ledger: ComputeLedger = field(default_factory=ComputeLedger)  # what the run generated (gdro.controllers.ledger)


@dataclass
class Trainer:
    """The algorithm: :meth:`step` takes one GRPO step and returns its row; :meth:`state_dict` is what a checkpoint
    holds of it. Call :meth:`setup` once before either (gdro.run.lifecycle.Run does)."""

    run: RunConfig
    models: Policy  # the policy, its tokenizer, its engine, its frozen reference (gdro.models.loading)
    reward: Reward
    controllers: Controllers
    problems: Problems
    loss_cfg: Loss
    optim_cfg: OptimConfig
    eval_cfg: EvalConfig
    train_sampling: SamplingParams
    forward: Forward  # how the policy's forwards run (layouts, micro-batches, processes): gdro.policy.forward
    filter: Filter = field(default_factory=NoFilter)  # which generated groups a step trains on (gdro.filters)
    st: _State | None = field(default=None, init=False, repr=False)  # set up by setup()

    # the parts under the names the step reads (and callers used before they were grouped)
    policy = property(lambda self: self.models.model)
    ref_model = property(lambda self: self.models.reference)
    engine = property(lambda self: self.models.engine)
    sampler = property(lambda self: self.controllers.sampler)
    allocator = property(lambda self: self.controllers.allocator)
    classifier = property(lambda self: self.controllers.classifier)
    train_problems = property(lambda self: self.problems.train)
    test_problems = property(lambda self: self.problems.test)
    dist = property(lambda self: self.forward.dist)  # how the run is spread over processes (gdro.distributed.Dist)

    def setup(self) -> None:
        """The optimiser, its schedule and the RNG streams; the controllers bound to the pool."""
        rngs = {"sampler": np.random.default_rng(derive_seed(self.run.seed, seeding.STREAM_SAMPLER)),
                "update": np.random.default_rng(derive_seed(self.run.seed, seeding.STREAM_UPDATE))}
        optimizer, scheduler = self.optim_cfg.make(self.policy.parameters())
        # what each controller may see of the pool: uids; the generator's labels only for the oracle control
        uids = tuple(p.uid for p in self.train_problems)
        self.classifier.bind(PromptPool(uids))
        levels = tuple(p.level for p in self.train_problems) if self.sampler.reads_labels else None
        self.sampler.bind(PromptPool(uids, levels), self.classifier.bin_spec())
        self.allocator.bind(self.classifier.bin_spec())
        self.st = _State(optimizer, scheduler, rngs)

    def first_row(self) -> dict[str, Any] | None:
        """The row before step 1 (logged as step 0): the initial policy's held-out evaluation, if asked for."""
        return {"step": 0, **self.evaluate()} if self.eval_cfg.at_start else None

    def step(self, step: int) -> dict[str, Any]:
        """Take training step ``step`` (1-based); returns its metrics row, with the held-out evaluation when due."""
        row = self._step(step, self.st)
        ev = self.eval_cfg
        if (step == self.run.steps and ev.at_end) or (ev.every and step % ev.every == 0):
            row.update(self.evaluate())
        self.st.step = step
        return row

    def _step(self, step: int, st: _State) -> dict[str, Any]:
        """One GRPO step, as the algorithm reads; returns its metrics row."""
        run, loss, clock = self.run, self.loss_cfg, StepClock()
        # 1-3. prompts, rollouts per prompt (ragged), generation and reward in one round (_draw) -- or in several, when
        #      a filter keeps only groups with signal (DAPO); the ledger counts every generated rollout, kept or not
        c = self.filter.collect(lambda count, rnd: self._draw(step, st, count, rnd, clock), run.prompts_per_step)
        d = c.kept
        with clock("reward_s"):
            # the loss's advantages over each prompt's own group (GRPO: Eq. 3)
            adv = loss.advantages(torch.as_tensor(d.scored.rewards, dtype=torch.float32),
                                  torch.as_tensor(d.roll.group_index), len(d.ids))
        with clock("controller_s"):
            # 4. the data adversary's multipliers on the advantages (ones for uniform GRPO; Eq. 16), then the update
            mult = self.sampler.loss_weights(d.bins, d.roll.group_index)
        with clock("update_s"):
            stats, losses = ppo_update(self.policy, st.optimizer, st.scheduler, d.roll,
                                       adv * torch.as_tensor(mult, dtype=adv.dtype), loss, self.optim_cfg,
                                       self.forward, rng=st.rngs["update"], ref_model=self.ref_model, local_rows=d.local)
        with clock("controller_s"):
            # 5. every controller observes the same step; the surrogate is linear in A, so dividing the weighted
            #    per-response loss by its (positive) multiplier gives the unweighted one, the official signal.
            #    Groups a filter dropped are history too: the classifier's, and a sampler's that keeps its own (record)
            if (dropped := c.discarded()) is not None:
                for part in (self.classifier, self.sampler):
                    getattr(part, "record", lambda *_: None)(dropped.ids, dropped.n_correct, dropped.n)
            feedback = StepFeedback(ids=d.ids, bins=d.bins, n=d.n, group_index=d.roll.group_index, correct=d.scored.correct,
                                    pg_loss=losses.pg / mult, kl=losses.kl, beta_kl=loss.beta_kl)
            for part in self.controllers:
                part.update(feedback)
        with clock("sync_s"):
            self.dist.sync_engine(self.engine, self.policy)
        st.ledger.trained(d.bins, d.n, d.mixed)
        row = {"step": step, **stats, **rollout_metrics(d.roll, d.scored, feedback.n_correct, adv,
                                                        self.train_sampling.max_new_tokens)}
        row.update(self.reward.metrics(c.generated.scored))  # every generated rollout's verdicts
        for part in (*self.controllers, self.filter):
            row.update(part.metrics())
        if run.samples.due(step) and self.dist.main:  # a bounded sample of what the policy wrote (no RNG drawn)
            row[ROW_KEYS["train"]] = train_records(step, d, self.train_problems, run.samples.train)
        return row | st.ledger.metrics(self.classifier.bin_spec().labels) | clock.metrics()

    def _draw(self, step: int, st: _State, count: int, rnd: int, clock: StepClock) -> Drawn:
        """One generation round of ``count`` prompts: sample, bin (history up to step-1), allocate, generate, score."""
        run = self.run
        with clock("gen_s"):
            ids = self.sampler.sample(count, st.rngs["sampler"], self.classifier)
            bins = self.classifier.bins(ids)
            n = self.allocator.allocate(ids, bins, run.rollouts_per_prompt, self.classifier)
            # the current policy samples (whole groups per shard); round 0 on the step's stream, later rounds on their own
            ids, bins, n, bounds = self.dist.shard_order(ids, bins, n)
            probs = [self.train_problems[i] for i in ids]
            keys = (seeding.STREAM_ROLLOUT, step) if rnd == 0 else (seeding.STREAM_ROLLOUT_ROUND, step, rnd)
            roll, local = self.dist.generate(self.engine, [p.prompt for p in probs], n, bounds,
                                             lambda *shard: derive_seed(run.seed, *keys, *shard), self.train_sampling)
            st.ledger.generated(bins, n, int(roll.lengths.sum()))  # every generated rollout counts (ledger)
        with clock("reward_s"):
            scored = self.dist.score(self.reward, roll, [probs[g].answer for g in roll.group_index], local)
        return Drawn(ids, bins, n, roll, scored, local)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds of the algorithm, by file: the policy; the optimiser and its schedule; the step, each
        controller's state, every RNG stream. Every process calls it (FSDP gathers); the main one holds it whole."""
        st = self.st
        policy_state, optim_state = self.dist.full_states(self.policy, st.optimizer)
        return {"policy": policy_state, "optimizer": {"optimizer": optim_state, "scheduler": st.scheduler.state_dict()},
                "trainer": {"step": st.step, "sampler": self.sampler.state_dict(),
                            "classifier": self.classifier.state_dict(), "allocator": self.allocator.state_dict(),
                            "rng": rng_state(st.rngs), "world_size": self.dist.world,
                            "ledger": st.ledger.state_dict()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from what :meth:`state_dict` returned (after :meth:`setup`); the engine samples the loaded
        policy."""
        st, tr = self.st, state["trainer"]
        self.dist.load_states(self.policy, st.optimizer, state["policy"], state["optimizer"]["optimizer"])
        st.scheduler.load_state_dict(state["optimizer"]["scheduler"])
        self.sampler.load_state_dict(tr["sampler"])
        self.classifier.load_state_dict(tr["classifier"])
        self.allocator.load_state_dict(tr["allocator"])
        set_rng_state(tr["rng"], st.rngs)
        if "ledger" in tr:  # a checkpoint from before the ledger: its counts start at 0
            st.ledger.load_state_dict(tr["ledger"])
        self.dist.sync_engine(self.engine, self.policy)
        st.step = int(tr["step"])

    def evaluate(self) -> dict[str, Any]:
        """Held-out evaluation on the main process (the engine holds its own copy of the weights: no collective)."""
        return self.dist.main_only(self._evaluate_here, default={})

    def _evaluate_here(self) -> dict[str, Any]:
        clock = StepClock()
        out = evaluate(self.engine, self.test_problems, self.reward, self.eval_cfg, self.train_sampling.max_new_tokens,
                       shown=self.run.samples.eval)  # and a bounded sample of its completions (gdro.run.samples)
        return out | {"time/eval_s": clock.elapsed()}

    def save(self, path: Path) -> None:
        """The policy as a HF model dir at ``path`` (``model.name_or_path=<path>`` loads it) in the compute dtype (fp32
        master weights cast down, as the base checkpoint was stored). Every process calls it (FSDP gathers); the main
        one writes. gdro.run.lifecycle.Run writes the final policy through it, atomically."""
        from gdro.models.loading import compute_dtype, save_model_dir

        state = self.dist.savable_state(self.policy, compute_dtype(self.policy))  # every process takes part (FSDP)
        if self.dist.main:  # one process writes; a LoRA run: merged, and its adapter
            save_model_dir(self.policy, self.models.tokenizer, path, state)


def __getattr__(name: str) -> Any:
    """``gdro.trainer.save_checkpoint``: where fault-injection tests patch a checkpoint's write, as before the Run
    existed (tests/test_run_safety.py). gdro.run.lifecycle.Run looks it up here at each write, so a patched one takes effect."""
    if name == "save_checkpoint":
        from gdro.run import lifecycle as run

        return run.save_checkpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
