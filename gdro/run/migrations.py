"""What an old checkpoint may hold that today's gdro names otherwise, in one table keyed by checkpoint schema.

Every checkpoint's ``meta.json`` records the schema of the gdro that wrote it (``"schema"``; absent: 0, every
checkpoint written before the schema existed). :data:`MIGRATIONS` maps a schema to what checkpoints of that schema
(or lower) may hold: a component class renamed (``target``), a module moved with its classes (``module``), a config
group added since whose given option behaves as gdro did before it (``group``), a key added since that nothing reads
while its switch, added with it, is at its default (``inert``: a default interpolated from another key, like
``reward.overlong_max_tokens: ${model.max_new_tokens}``, is no component default), a key moved to another group
(``key``: ``old`` is read as ``new``, same value), and a value a group added since takes where the old config held a
given value (``implied``: ``old`` and ``new`` are ``key=value``; it beats the group's ``group`` entry), and a part of
the checkpoint's state added since (``state``: ``old`` is its dotted path in the state, ``trainer.ledger``; ``new`` the
JSON value that behaves as before, or ``0 per <key>``: a zero for each item of the sibling ``<key>``, where the part
holds that key). A resume reads the old config through them (gdro.run.record.config_differences, :func:`migrated`)
and the old state (gdro.run.lifecycle, :func:`migrated_state`), so such a checkpoint continues, and nothing else is
forgiven; no loader checks for a missing part itself. A ``key`` entry also makes a moved key given to today's gdro (in a preset, or
``+loss.scale_rewards=``) a one-line error naming the new key (gdro.compose.build.check_moved_keys, :func:`moved_key`).

**When an entry can go:** the entries under schema ``s`` are needed while gdro resumes checkpoints of schema ``s``.
Raising :data:`OLDEST_RESUMABLE` above ``s`` (a release note: such checkpoints are refused with one line) removes
them; the table's test fails while an entry is kept that no resumable schema needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gdro.common.moved import MOVED

SCHEMA = 3  # the checkpoint schema this gdro writes (meta.json "schema")
OLDEST_RESUMABLE = 0  # the oldest schema a resume accepts; lower ones are refused in one line


@dataclass(frozen=True)
class Migration:
    """One name an old checkpoint may hold: ``old`` is read as ``new`` (``kind``: target | module | group | key |
    implied | state), or, for ``inert``, the key ``old`` is unread while the key ``new`` is at its default."""

    kind: str
    old: str
    new: str
    why: str  # the change that made it (issue)


_MOVED = {  # #29: the package layout
    "gdro.allocators": "gdro.controllers.allocators", "gdro.bandit": "gdro.controllers.bandit",
    "gdro.bins": "gdro.controllers.bins", "gdro.budget": "gdro.controllers.budget",
    "gdro.difficulty": "gdro.controllers.difficulty", "gdro.oracle": "gdro.controllers.oracle",
    "gdro.samplers": "gdro.controllers.samplers", "gdro.rewards": "gdro.grading.rewards",
    "gdro.golds": "gdro.grading.golds", "gdro.passk": "gdro.grading.passk", "gdro.rundir": "gdro.run.lock",
    "gdro.tracking": "gdro.algorithm.tracking", "gdro.checkpoint": "gdro.run.checkpoint",
    "gdro.ioerrors": "gdro.common.ioerrors", "gdro.seeding": "gdro.algorithm.seeding", "gdro.models": "gdro.models.loading",
    "gdro.tiny": "gdro.models.tiny", "gdro.qwen3": "gdro.models.qwen3", "gdro.prompts": "gdro.data.prompts",
    "gdro.evaluation": "gdro.algorithm.heldout", "gdro.advantages": "gdro.loss.advantages",
}

MIGRATIONS: dict[int, tuple[Migration, ...]] = {
    0: (
        Migration("target", "gdro.loss.LossConfig", "gdro.loss.grpo.GRPOLoss", "#29: the loss seam"),
        *(Migration("module", old, new, "#29: the package layout") for old, new in _MOVED.items()),
        Migration("group", "filter._target_", "gdro.algorithm.filters.NoFilter", "#31: filter=none is the old behaviour"),
        Migration("group", "skip._target_", "gdro.controllers.skip.NoSkip", "#31: skip=none is the old behaviour"),
        Migration("inert", "reward.overlong_max_tokens", "reward.overlong_buffer",
                  "#37: DAPO's overlong punishment reads its L_max only with overlong_buffer > 0 (0: off, as before)"),
        Migration("state", "trainer.world_size", "1",
                  "FSDP2: a checkpoint records how many processes wrote it; before, one did"),
        Migration("state", "meta.world_size", "1", "FSDP2: meta.json records it too; before, one process wrote it"),
        Migration("state", "trainer.ledger", '{"rollouts_cum": 0, "tokens_cum": 0, "grad_groups_cum": 0}',
                  "#31 (1): the compute ledger is checkpointed; an older run's counts start at 0"),
        Migration("state", "trainer.classifier.streak", "0 per uids",
                  "#31 (2): the zero-variance streak is checkpointed; an older run's restarts at 0"),
    ),
    1: (  # #50: the advantage estimator is a config group of its own, apart from the loss
        *(Migration("key", f"loss.{old}", f"advantage.{new}", "#50: the advantages are the advantage group's")
          for old, new in (("scale_rewards", "scale_rewards"), ("norm_adv_by_std", "norm_adv_by_std"),
                           ("adv_eps", "eps"), ("unbiased_std", "unbiased_std"))),
        Migration("implied", "loss._target_=gdro.loss.dr_grpo.DrGRPOLoss",
                  "advantage._target_=gdro.loss.advantage_estimators.DrGRPOAdvantage",
                  "#50: loss=dr-grpo computed r - mean itself; it now selects advantage=dr-grpo"),
        Migration("group", "advantage._target_", "gdro.loss.advantage_estimators.GRPOAdvantage",
                  "#50: every other loss computed advantage=grpo's advantages itself"),
    ),
    2: (  # #50: each floor a folder; the old module paths (gdro.common.moved.MOVED) read at their new homes
        *(Migration("module", old, new, "#50: the floor folders") for old, new in MOVED.items()),
    ),
}


def schema_of(meta: dict[str, Any]) -> int:
    """The schema a checkpoint's meta.json records (0 before gdro recorded one)."""
    return int(meta.get("schema", 0))


def check_schema(schema: int, where: str) -> None:
    """Refuse, in one line, a checkpoint this gdro cannot read: written by a newer gdro, or older than it resumes."""
    if schema > SCHEMA:
        raise ValueError(f"{where} was written by a newer gdro (checkpoint schema {schema}; this gdro reads up to "
                         f"{SCHEMA}): upgrade gdro to resume it")
    if schema < OLDEST_RESUMABLE:
        raise ValueError(f"{where} has checkpoint schema {schema}; this gdro resumes schema {OLDEST_RESUMABLE} "
                         f"to {SCHEMA}: resume it with an older gdro, or start a new run")


def applying(schema: int, kind: str) -> list[Migration]:
    """The entries of ``kind`` that a checkpoint of ``schema`` may need (those under every schema ≥ it)."""
    return [m for s, entries in MIGRATIONS.items() if s >= schema for m in entries if m.kind == kind]


def renamed_target(target: Any, schema: int = 0) -> Any:
    """``target`` as today's gdro names it, for a checkpoint of ``schema``: a renamed class, or a class of a moved
    module read at its new home. Anything else (a user's own class among them) is returned as it is."""
    if not isinstance(target, str):
        return target
    for m in applying(schema, "target"):
        if target == m.old:
            return m.new
    module, _, name = target.rpartition(".")
    for m in applying(schema, "module"):
        if module == m.old:
            return f"{m.new}.{name}"
    return target


def _new_for(kind: str, key: str, schema: int) -> str | None:
    return next((m.new for m in applying(schema, kind) if m.old == key), None)


def added_group(key: str, schema: int = 0) -> str | None:
    """For a config key an old checkpoint lacks (``filter._target_``): the value that behaves as before, if any."""
    return _new_for("group", key, schema)


def moved_key(key: str) -> Migration | None:
    """The ``key`` entry of a dotted key gdro has moved (``loss.adv_eps`` -> ``advantage.eps``), whatever the schema."""
    return next((m for m in applying(OLDEST_RESUMABLE, "key") if m.old == key), None)


def migrated(flat: dict[str, Any], schema: int = 0) -> dict[str, Any]:
    """An old checkpoint's flattened config (dotted keys, ``_target_`` values already renamed) as today's gdro names
    it: each moved key under its new name, and each value a group added since takes from what the config held."""
    out = dict(flat)
    for m in applying(schema, "key"):
        if m.old in out and m.new not in out:
            out[m.new] = out.pop(m.old)
    for m in applying(schema, "implied"):
        (old_key, old_value), (new_key, new_value) = m.old.split("=", 1), m.new.split("=", 1)
        if out.get(old_key) == old_value and new_key not in out:
            out[new_key] = new_value
    return out


def inert_switch(key: str, schema: int = 0) -> str | None:
    """For a config key an old checkpoint lacks (``reward.overlong_max_tokens``): the key whose default leaves it
    unread (``reward.overlong_buffer``), if any."""
    return _new_for("inert", key, schema)


def migrated_state(state: dict[str, Any], schema: int = 0) -> dict[str, Any]:
    """An old checkpoint's state (by file: ``{"policy": ..., "trainer": ...}``), in place, with each part its schema
    may lack (the ``state`` entries) filled in as it behaves as before; a part it holds is kept as it is."""
    for m in applying(schema, "state"):
        *parents, key = m.old.split(".")
        node: Any = state
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or key in node:
            continue
        per = m.new.removeprefix("0 per ") if m.new.startswith("0 per ") else None
        if per is None:
            node[key] = json.loads(m.new)
        elif per in node:  # a part that holds the sibling (another classifier never held either)
            node[key] = [0] * len(node[per])
    return state
