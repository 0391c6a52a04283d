"""Is the crossed design complete? (paper 001 §2: every policy under every request, on the same items).

A scores table assembled from several runs can hold half a policy (one request only), an arm without its
partner of the same seed, or a policy scored on 2 of the 6 items the others were. Paired contrasts over
such a table would pair unlike things or quietly average over different item sets, so the analysis refuses
it, naming the first gap in one line, unless ``--allow-partial``: then the incomplete policies are left
out (named on the console and in the protocol card) and the complete rest is analysed.

Checked per (task, template), after a decoding sweep is split into tasks:

- every (policy, request) cell covers every item any cell of that (task, template) covers;
- the initial policy holds every request the (task, template) holds;
- an arm trained on convention c holds c and its crossed partner's request, where the (task, template)
  holds them for any policy;
- an arm of convention c and seed s has a partner arm (the partner convention, seed s) when that
  convention is trained at all;
- a policy's requests are not split across task names (one study imported under two names).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from crossed_rlvr.rewards.conventions import ARM_PARTNER, CONVENTIONS, PARTNER


@dataclass(frozen=True)
class Gap:
    task: str
    template: str
    policy: str
    why: str

    def line(self) -> str:
        return f"{self.task}/{self.template}: policy {self.policy!r} {self.why}"


def design_gaps(scores: pd.DataFrame) -> list[Gap]:
    """Every gap of the crossed design, in a fixed order (task, template, policy)."""
    gaps: list[Gap] = []
    cols = ["task", "template", "policy", "training_convention", "train_seed", "request"]
    for (task, template), part in scores.groupby(["task", "template"], sort=True):
        n_items = part["item_id"].nunique()
        requests = sorted(set(part["request"]))
        cells = part.groupby(cols, dropna=False, sort=True)["item_id"].nunique().reset_index(name="n")
        for row in cells.itertuples(index=False):
            if row.n < n_items:
                gaps.append(Gap(task, template, row.policy, f"has {row.n} of the {n_items} items under request "
                                                            f"{row.request!r}"))
        arms = cells[cells.training_convention != "initial"]
        trained = set(arms.training_convention)
        for policy, pol in cells.groupby("policy", sort=True):
            conv = pol.training_convention.iloc[0]
            held = set(pol.request)
            # the initial policy: every request of the table; an arm: its own and its partner's, where the table
            # holds them (a table of one request is a convention-matched evaluation, complete as such)
            # (the answer-only arm, the I1 control of §2.4, is read under its own request only: it has no crossed partner)
            own = CONVENTIONS[conv].request if conv in CONVENTIONS else conv
            crossed = {own, PARTNER.get(own)} if conv in ARM_PARTNER else {own}
            need = set(requests) if conv == "initial" else crossed & set(requests)
            missing = sorted(need - held)
            if missing:
                gaps.append(Gap(task, template, policy, f"has no response under request {', '.join(map(repr, missing))}"
                                f" (the table holds {', '.join(map(repr, requests))} there)"))
            partner = ARM_PARTNER.get(conv)
            if conv != "initial" and partner in trained:
                seed = pol.train_seed.iloc[0]
                mates = arms[(arms.training_convention == partner) & (arms.train_seed == seed)]
                if mates.empty:
                    gaps.append(Gap(task, template, policy, f"(trained on {conv}, seed {seed}) has no {partner} arm "
                                                            f"of seed {seed} to cross with"))
    per_task = scores.drop_duplicates(["policy", "task", "template", "request"])
    for policy, grp in per_task.groupby("policy", sort=True):  # one policy's requests under two task names
        if grp.task.nunique() > 1 and grp.groupby(["task", "template"]).request.nunique().max() < grp.request.nunique():
            spread = "; ".join(f"{t}: {', '.join(sorted(set(g.request)))}" for t, g in grp.groupby("task"))
            for (task, template), _ in grp.groupby(["task", "template"], sort=True):
                gaps.append(Gap(task, template, policy, f"has its requests under different task names ({spread}); "
                                                        "import them under one task name (crossed-import --task)"))
    return gaps


def complete_part(scores: pd.DataFrame) -> tuple[pd.DataFrame, list[Gap]]:
    """The table without the policies that leave a gap (per task and template), repeated until none is left
    (dropping an arm can leave its partner unpaired); and the gaps that removed them."""
    removed: list[Gap] = []
    while True:
        gaps = design_gaps(scores)
        if not gaps:
            return scores, removed
        removed += gaps
        drop = {(g.task, g.template, g.policy) for g in gaps}
        keys = list(zip(scores["task"], scores["template"], scores["policy"]))
        scores = scores[[k not in drop for k in keys]]
