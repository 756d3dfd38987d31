"""Entry points. ``gdro-train`` is the Hydra application (the main job)."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
log = logging.getLogger("gdro")


@hydra.main(config_path=CONF_DIR, config_name="train", version_base="1.3")
def _train(cfg: DictConfig) -> float | None:
    from gdro.build import build_trainer

    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra")}
    trainer = build_trainer(cfg, Path(hc.runtime.output_dir), choices=choices)
    try:
        rows = trainer.fit()
    finally:
        trainer.logger.close()
    evals = [r for r in rows if any(k.startswith("eval/mean@") for k in r)]
    if evals:
        key = next(k for k in evals[-1] if k.startswith("eval/mean@") and "/level_" not in k)
        log.info("%s: first %.2f -> last %.2f  (run dir: %s)", key, evals[0][key], evals[-1][key], hc.runtime.output_dir)
        return float(evals[-1][key])
    return None


def train() -> None:
    """Console script ``gdro-train``."""
    _train()


if __name__ == "__main__":
    train()
