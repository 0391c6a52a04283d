"""The warm start's stopping rule: a request-following band measured by sampling (paper 001 §2).

The initial policy of the crossed design must follow both requests often but not always: a policy that
never writes the requested marker earns no GRPO reward (nothing to learn from), and one that always does
leaves no convention preference to learn. Every ``every`` optimizer steps the model samples the dev items
under each request at the evaluation's temperature (greedy decoding overstates request-following), and
the rate at which it writes the requested payload is recorded; training stops at the first check where
every request's rate lies inside ``[low, high]``. The samples use fixed per-item seeds, so every check
draws from the same random numbers and a rerun stops at the same step. Where the evaluation generates in
bfloat16 (``eval.dtype``), the checks sample under bfloat16 autocast over the training weights, the
precision the policy is evaluated in (and ~10% faster than fp32 on this CPU).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import (
        PreTrainedModel,
        PreTrainedTokenizerBase,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )

    from crossed_rlvr.conf.schema import BandConf
    from crossed_rlvr.eval.generate.engines import GenParams
    from crossed_rlvr.eval.generate.snapshot import Snapshot


def payload_rates(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, items: list[dict[str, Any]],
                  requests: list[str], params: GenParams,
                  base_seed: int, batch_size: int, system: str | None = None,
                  bf16: bool = False, snapshot: Snapshot | None = None, shared_prefix: bool = False
                  ) -> dict[str, float]:
    """Share of sampled responses that carry each request's payload, d_r(y) (App. B.1); ``bf16``: sampled under
    bfloat16 autocast; ``snapshot``: sampled from its copy of the weights instead (``eval.linear=onednn``: the
    evaluation's packed layers). Every request's prompts decode in one stream."""
    import contextlib

    import torch

    from crossed_rlvr.eval.generate.engines import HFBackend
    from crossed_rlvr.eval.generate.plan import item_seed
    from crossed_rlvr.eval.score.payload import detect
    from crossed_rlvr.prompts import messages, render

    was_training = model.training
    model.eval()
    state = torch.random.get_rng_state()
    try:  # one autocast context for every request: each weight is cast once a check
        sampled = snapshot.refresh(model) if snapshot is not None else model
        autocast = (contextlib.nullcontext() if snapshot is not None
                    else torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16))
        ids = [render(tokenizer, messages(it["question"], request, "original", system))[1]
               for request in requests for it in items]
        seeds = [item_seed(base_seed, it, k, 0) for _ in requests for k, it in enumerate(items)]
        with autocast:
            outs = HFBackend(sampled, tokenizer, batch_size, shared_prefix).generate(ids, seeds, params)
        n = len(items)
        rates = {request: sum(detect(o.text).present(request) for o in outs[j * n:(j + 1) * n]) / max(1, n)
                 for j, request in enumerate(requests)}
    finally:
        torch.random.set_rng_state(state)
        model.train(was_training)
    return rates


def band_callback(band: BandConf, items: list[dict[str, Any]], tokenizer: PreTrainedTokenizerBase, requests: list[str],
                  params: GenParams,
                  base_seed: int, batch_size: int, system: str | None = None, bf16: bool = False,
                  snapshot: Snapshot | None = None, shared_prefix: bool = False) -> Any:
    """A TrainerCallback that checks the band at step 0 and every ``band.every`` steps and stops inside it.

    Its ``summary`` (every check's rates, the step it stopped at, whether the band was reached) goes into
    the warm start's ``sft_summary.json``."""
    from transformers import TrainerCallback

    low, high, every = float(band.low), float(band.high), int(band.every)

    class FollowBand(TrainerCallback):
        def __init__(self) -> None:
            self.checks: list[dict[str, Any]] = []
            self.seconds = 0.0

        def check(self, model: PreTrainedModel, step: int) -> bool:
            start = time.perf_counter()
            rates = payload_rates(model, tokenizer, items, requests, params, base_seed, batch_size, system, bf16,
                                  snapshot, shared_prefix)
            self.seconds += time.perf_counter() - start
            self.checks.append({"step": step, **{r: round(v, 4) for r, v in rates.items()}})
            inside = all(low <= v <= high for v in rates.values())
            print(f"warm start, step {step}: requested payload " + ", ".join(f"{r} {v:.0%}" for r, v in rates.items())
                  + f" ({'inside' if inside else 'outside'} the band [{low:.0%}, {high:.0%}])", flush=True)
            return inside

        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           model: PreTrainedModel | None = None, **kwargs: Any) -> None:
            self.check(model, 0)

        def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        model: PreTrainedModel | None = None, **kwargs: Any) -> None:
            if state.global_step % every == 0 and self.check(model, state.global_step):
                control.should_training_stop = True

        def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                         model: PreTrainedModel | None = None, **kwargs: Any) -> None:
            if self.checks and self.checks[-1]["step"] != state.global_step:  # "after" is the final model
                self.check(model, state.global_step)

        @property
        def summary(self) -> dict[str, Any]:
            last = self.checks[-1] if self.checks else {}
            return {"band": {"low": low, "high": high, "every": every, "items": len(items),
                             "temperature": params.temperature, "top_p": params.top_p,
                             "max_new_tokens": params.max_new_tokens, "bf16": bf16,
                             **({"linear": "onednn"} if snapshot is not None else {})},
                    "checks": self.checks, "before": self.checks[0] if self.checks else None, "after": last,
                    "reached": bool(last) and all(low <= last[r] <= high for r in requests),
                    "check_seconds": round(self.seconds, 1)}

    return FollowBand()
