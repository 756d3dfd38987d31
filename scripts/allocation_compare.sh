#!/usr/bin/env bash
# The decisive comparison of issue #31, as one command: nine allocation rows (GRPO, dynamic sampling, pre-rollout skip,
# knapsack, Rollout-GDRO paper default, Rollout-GDRO variance signal, square-root, Prompt-GDRO, oracle) x 8 seeds on
# experiment=toy-curriculum at n̄ = 4 (regime A of the pilot; the allocators' arms in [2, 12] = 3 × n̄) for 250 steps,
# paired by seed with GRPO; then gdro-report at equal generated tokens:
#   <out>/report/compute.md    tokens to GRPO's final tail mean@8, area under the held-out curve vs tokens, final
#                              accuracy at equal tokens and at equal steps, paired with 95% CIs
#   <out>/report/paired.md     Δ vs GRPO at equal steps;  <out>/report/mechanism.md  groups with gradient, rollouts per
#                              pass bin, WSE
#
#   scripts/allocation_compare.sh                                  # the full comparison -> outputs/allocation
#   scripts/allocation_compare.sh --seeds 0 1 --steps 4 --out outputs/allocation-check -- data.train_size=16   # a tiny end-to-end check
#
# Arguments go to scripts/reproduce_toy.py --preset allocation (--seeds, --steps, --jobs, --methods, --out, then
# gdro-train overrides after --). Finished runs are skipped, so an interrupted comparison resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
exec "$PYTHON" scripts/reproduce_toy.py --preset allocation "$@"
