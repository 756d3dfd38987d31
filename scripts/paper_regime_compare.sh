#!/usr/bin/env bash
# The comparison of issue #36, as one command: the paper regime's table (experiment=toy-paper-regime: the paper's
# pass@8 bins over a pool that starts mostly in accbin_0; 9 rows x seeds 0-7 x 150 steps) and the same new rows in
# #31's regime (experiment=toy-curriculum at n̄ = 4: GRPO rerun, the chosen Rollout-GDRO variant, learnability, MoPPS;
# 250 steps), each paired by seed with GRPO; then gdro-report at equal generated tokens and the paper's mechanism
# figures (<out>/report/paper_mechanism.md, wse_ratio.png, budget_vs_data_<row>.png, budget_snapshots.png,
# macro_dynamics.png, lead_lag.png). Protocol and results: docs/results.md, "The paper regime (issue #36)".
#
#   scripts/paper_regime_compare.sh                    # both tables -> outputs/paper-regime, outputs/allocation-36
#   OUT_ROOT=outputs/check scripts/paper_regime_compare.sh --seeds 0 --steps 4 -- data.train_size=16   # a tiny check
#
# OUT_ROOT (default outputs) holds the two sweep dirs. Arguments go to both scripts/reproduce_toy.py calls (--seeds,
# --steps, --jobs, --methods, then gdro-train overrides after --).
# Finished runs are skipped, so an interrupted comparison resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT_ROOT="${OUT_ROOT:-outputs}"
"$PYTHON" scripts/reproduce_toy.py --preset paper-regime --out "$OUT_ROOT/paper-regime" "$@"
"$PYTHON" scripts/reproduce_toy.py --preset allocation-36 --out "$OUT_ROOT/allocation-36" "$@"
