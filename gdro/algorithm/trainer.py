"""The GRPO algorithm: plain Python components in, one metrics row per step out. No Hydra, no run dir here.

One step reads like the algorithm (:meth:`Trainer._step`; docs/architecture.md): sample prompts → allocate rollouts →
generate (ragged) → reward → group advantages → loss weights → clipped-surrogate update → controller updates → log.
The run around it (run dir, lock, run.json, checkpoints, resume, signals, the final save) is gdro.run.lifecycle.Lifecycle's, which
drives the loop and checkpoints the algorithm through :meth:`Trainer.state_dict`. How a step runs (forward layouts,
micro-batches, processes) is the execution layer's (gdro.algorithm.execution.Execution), handed in; the algorithm asks it to
generate, score, update, sync, checkpoint and save, and nothing here branches on how it does so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gdro.algorithm import seeding
from gdro.algorithm.execution import Execution
from gdro.algorithm.filters import Drawn, Filter, NoFilter
from gdro.algorithm.heldout import EvalConfig, evaluate
from gdro.algorithm.samples import ROW_KEYS, train_records
from gdro.algorithm.seeding import derive_seed, rng_state, set_rng_state
from gdro.algorithm.settings import RunSettings
from gdro.algorithm.tracking import StepClock
from gdro.common.interfaces import Controllers, Problems, PromptPool, Reward, StepFeedback
from gdro.common.rollouts import SamplingParams
from gdro.controllers.ledger import ComputeLedger, rollout_metrics
from gdro.loss import Objective
from gdro.loss.advantage_estimators import groups_with_gradient
from gdro.models.loading import Policy
from gdro.policy import OptimConfig


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
    holds of it. Call :meth:`setup` once before either (gdro.run.lifecycle.Lifecycle does)."""

    settings: RunSettings  # the run's top-level settings (conf/train.yaml; gdro.algorithm.settings)
    policy: Policy  # the policy model, its tokenizer, its engine, its frozen reference (gdro.models.loading)
    reward: Reward
    controllers: Controllers
    problems: Problems
    objective: Objective  # the advantage estimator (advantage=) and the loss that reads its advantages (loss=)
    optim_cfg: OptimConfig
    eval_cfg: EvalConfig
    train_sampling: SamplingParams
    execution: Execution  # how a step runs (forward layouts, micro-batches, processes): gdro.algorithm.execution
    filter: Filter = field(default_factory=NoFilter)  # which generated groups a step trains on (gdro.algorithm.filters)
    st: _State | None = field(default=None, init=False, repr=False)  # set up by setup()

    def setup(self) -> None:
        """The optimiser, its schedule and the RNG streams; the controllers bound to the pool."""
        rngs = {"sampler": np.random.default_rng(derive_seed(self.settings.seed, seeding.STREAM_SAMPLER)),
                "update": np.random.default_rng(derive_seed(self.settings.seed, seeding.STREAM_UPDATE))}
        optimizer, scheduler = self.optim_cfg.make(self.policy.model.parameters())
        # what each controller may see of the pool: uids; the generator's labels only for the oracle control
        c, uids = self.controllers, tuple(p.uid for p in self.problems.train)
        c.classifier.bind(PromptPool(uids))
        levels = tuple(p.level for p in self.problems.train) if c.sampler.reads_labels else None
        c.sampler.bind(PromptPool(uids, levels), c.classifier.bin_spec())
        c.allocator.bind(c.classifier.bin_spec())
        self.st = _State(optimizer, scheduler, rngs)

    def first_row(self) -> dict[str, Any] | None:
        """The row before step 1 (logged as step 0): the initial policy's held-out evaluation, if asked for."""
        return {"step": 0, **self.evaluate()} if self.eval_cfg.at_start else None

    def step(self, step: int) -> dict[str, Any]:
        """Take training step ``step`` (1-based); returns its metrics row, with the held-out evaluation when due."""
        row = self._step(step, self.st)
        ev = self.eval_cfg
        if (step == self.settings.steps and ev.at_end) or (ev.every and step % ev.every == 0):
            row.update(self.evaluate())
        self.st.step = step
        return row

    def _step(self, step: int, st: _State) -> dict[str, Any]:
        """One GRPO step, as the algorithm reads; returns its metrics row."""
        run, (advantage, loss), clock = self.settings, self.objective, StepClock()
        # 1-3. prompts, rollouts per prompt (ragged), generation and reward in one round (_draw) -- or in several, when
        #      a filter keeps only groups with signal (DAPO); the ledger counts every generated rollout, kept or not
        c = self.filter.collect(lambda count, rnd: self._draw(step, st, count, rnd, clock), run.prompts_per_step)
        d = c.kept
        with clock("reward_s"):
            # the advantages over each prompt's own group (advantage=<estimator>; GRPO: Eq. 3), which the loss reads
            adv = advantage(torch.as_tensor(d.scored.rewards, dtype=torch.float32),
                            torch.as_tensor(d.roll.group_index), len(d.ids))
        with clock("controller_s"):
            # 4. the data adversary's multipliers on the advantages (ones for uniform GRPO; Eq. 16), then the update
            mult = self.controllers.sampler.loss_weights(d.bins, d.roll.group_index)
        with clock("update_s"):
            stats, losses = self.execution.update(self.policy.model, st.optimizer, st.scheduler, d.roll,
                                                  adv * torch.as_tensor(mult, dtype=adv.dtype), loss, self.optim_cfg,
                                                  rng=st.rngs["update"], ref_model=self.policy.reference)
        with clock("controller_s"):
            # 5. every controller observes the same step; the surrogate is linear in A, so dividing the weighted
            #    per-response loss by its (positive) multiplier gives the unweighted one, the official signal.
            #    Groups a filter dropped are history too: the classifier's, and a sampler's that keeps its own (record)
            if (dropped := c.discarded()) is not None:
                for part in (self.controllers.classifier, self.controllers.sampler):
                    getattr(part, "record", lambda *_: None)(dropped.ids, dropped.n_correct, dropped.n)
            feedback = StepFeedback(ids=d.ids, bins=d.bins, n=d.n, group_index=d.roll.group_index, correct=d.scored.correct,
                                    pg_loss=losses.pg / mult, kl=losses.kl, beta_kl=loss.beta_kl)
            for part in self.controllers:
                part.update(feedback)
        with clock("sync_s"):
            self.execution.sync_engine(self.policy.engine, self.policy.model)
        st.ledger.trained(d.bins, d.n, groups_with_gradient(advantage, d.mixed, adv, d.roll.group_index,
                                                         len(d.ids)))
        row = {"step": step, **stats, **rollout_metrics(d.roll, d.scored, feedback.n_correct, adv,
                                                        self.train_sampling.max_new_tokens)}
        row.update(self.reward.metrics(c.generated.scored))  # every generated rollout's verdicts
        for part in (*self.controllers, self.filter):
            row.update(part.metrics())
        if run.samples.due(step):  # a bounded sample of what the policy wrote (no RNG drawn), where the files are written
            row.update(self.execution.on_writer(
                lambda: {ROW_KEYS["train"]: train_records(step, d, self.problems.train, run.samples.train)}, {}))
        return row | st.ledger.metrics(self.controllers.classifier.bin_spec().labels) | clock.metrics()

    def _draw(self, step: int, st: _State, count: int, rnd: int, clock: StepClock) -> Drawn:
        """One generation round of ``count`` prompts: sample, bin (history up to step-1), allocate, generate, score."""
        run = self.settings
        with clock("gen_s"):
            ids = self.controllers.sampler.sample(count, st.rngs["sampler"], self.controllers.classifier)
            bins = self.controllers.classifier.bins(ids)
            n = self.controllers.allocator.allocate(ids, bins, run.rollouts_per_prompt, self.controllers.classifier)
            # the current policy samples (the execution may reorder the groups); round 0 on the step's stream, later
            # rounds on their own
            keys = (seeding.STREAM_ROLLOUT, step) if rnd == 0 else (seeding.STREAM_ROLLOUT_ROUND, step, rnd)
            ids, bins, n, roll = self.execution.generate(self.policy.engine, self.problems.train, ids, bins, n,
                                                         lambda *part: derive_seed(run.seed, *keys, *part),
                                                         self.train_sampling)
            st.ledger.generated(bins, n, int(roll.lengths.sum()))  # every generated rollout counts (ledger)
        with clock("reward_s"):
            golds = [self.problems.train[ids[g]].answer for g in roll.group_index]
            rows = [self.problems.train[ids[g]] for g in roll.group_index] \
                if getattr(self.reward, "reads_problems", False) else None  # a user's reward functions read them
            scored = self.execution.score(self.reward, roll, golds, rows)
        return Drawn(ids, bins, n, roll, scored)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds of the algorithm, by file: the policy; the optimiser and its schedule; the step, each
        controller's state, every RNG stream (the execution adds the policy's and the optimiser's, whole)."""
        st, c = self.st, self.controllers
        return self.execution.checkpoint_state(self.policy.model, st.optimizer, st.scheduler, {
            "step": st.step, "sampler": c.sampler.state_dict(), "classifier": c.classifier.state_dict(),
            "allocator": c.allocator.state_dict(), "rng": rng_state(st.rngs), "ledger": st.ledger.state_dict()})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from what :meth:`state_dict` returned (after :meth:`setup`); the engine samples the loaded
        policy."""
        st = self.st
        tr = self.execution.load_checkpoint_state(self.policy.model, st.optimizer, st.scheduler, state)
        self.controllers.sampler.load_state_dict(tr["sampler"])
        self.controllers.classifier.load_state_dict(tr["classifier"])
        self.controllers.allocator.load_state_dict(tr["allocator"])
        set_rng_state(tr["rng"], st.rngs)
        st.ledger.load_state_dict(tr["ledger"])
        self.execution.sync_engine(self.policy.engine, self.policy.model)
        st.step = int(tr["step"])

    def evaluate(self) -> dict[str, Any]:
        """Held-out evaluation, in one process (the engine holds its own copy of the weights: no collective)."""
        return self.execution.on_writer(self._evaluate_here, default={})

    def _evaluate_here(self) -> dict[str, Any]:
        clock = StepClock()
        out = evaluate(self.policy.engine, self.problems.test, self.reward, self.eval_cfg,
                       self.train_sampling.max_new_tokens, shown=self.settings.samples.eval)  # and a bounded sample of its completions (gdro.algorithm.samples)
        return out | {"time/eval_s": clock.elapsed()}

    def save(self, path: Path) -> None:
        """The policy as a HF model dir at ``path`` (``model.name_or_path=<path>`` loads it) in the compute dtype (fp32
        master weights cast down, as the base checkpoint was stored), written once (a LoRA run: merged, and its
        adapter). gdro.run.lifecycle.Lifecycle writes the final policy through it, atomically."""
        self.execution.save_policy(self.policy.model, self.policy.tokenizer, path)
