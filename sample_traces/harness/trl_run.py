"""TRL's ``GRPOTrainer`` on CPU, two ranks under torchrun with gloo, profiled with torch.profiler.

Launched by ``run.py`` as ``torchrun --nproc-per-node 2 -m sample_traces.harness.trl_run OUT``.
The model (a tiny Llama) and the tokenizer (a character-level WordLevel model from the
``tokenizers`` library) are built here; nothing is downloaded. TRL's own per-block timers
(``trl.extras.profiling.ProfilingContext``, which TRL sends only to experiment trackers) are
wrapped so each block's start and end land in ``timers_rank<r>.json`` as ground truth.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

TRL_PINS = {"trl": "1.16.0", "transformers": "5.24.0", "accelerate": "1.15.0",
            "datasets": "5.2.0", "tokenizers": "0.23.3"}
"""The versions these samples were made with (also pinned in pyproject's ``samples`` extra)."""

MAX_STEPS = 5
PROFILE_WAIT, PROFILE_WARMUP, PROFILE_ACTIVE = 1, 1, 2
"""torch.profiler schedule: trainer steps 3 and 4 (1-based) are recorded."""
GROUP = 4
PROMPTS_PER_RANK = 1
MAX_NEW = 24
SAVE_EVERY = 2
SEED = 7

_local = threading.local()
RECORDS: list[dict[str, Any]] = []
LENGTHS: list[dict[str, Any]] = []
COLLECTIVES: list[dict[str, Any]] = []
WRAPPED_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
    "broadcast_object_list", "gather", "gather_object", "reduce", "reduce_scatter_tensor",
    "barrier",
)
"""torch.distributed's Python collectives (what TRL and accelerate call: gather of rewards and
completions, broadcast of objects). DDP's gradient all-reduce runs in its C++ reducer and is
not seen here."""


def check_pins() -> None:
    import importlib.metadata as md

    wrong = {k: md.version(k) for k, v in TRL_PINS.items() if md.version(k) != v}
    if wrong:
        sys.exit(f"trl_run: needs {TRL_PINS}, found {wrong} (pip install -e '.[samples]')")


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from .model import VOCAB

    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"<pad>|<eos>|."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   bos_token=None, padding_side="left")


def build_model(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def arithmetic_reward(completions: list[str], prompts: list[str], **kw: Any) -> list[float]:
    """The harness's rule reward, on text: 1 for the right sum, 0.2 for a short number.

    Also notes this rank's completion lengths (tokens) for the ground truth."""
    state = kw.get("trainer_state")
    ids = kw.get("completion_ids") or []
    LENGTHS.append({"step": None if state is None else state.global_step + 1,
                    "lengths": [len(c) for c in ids]})
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        a, b = prompt.rstrip("=").split("+")
        answer = completion.replace("<eos>", "").strip()
        ok = answer.isdigit()
        out.append(
            1.0
            if ok and int(answer) == int(a) + int(b)
            else 0.2
            if ok and len(answer) <= 3
            else 0.0
        )
    return out


def wrap_trl_timers() -> None:
    """Record every ``ProfilingContext`` block (start/end epoch ns, name, step) on every rank."""
    from trl.extras import profiling
    from trl.trainer import grpo_trainer

    enter, exit_ = profiling.ProfilingContext.__enter__, profiling.ProfilingContext.__exit__

    def timed_enter(self):
        stack = getattr(_local, "stack", [])
        self._truth = {
            "name": self.name,
            "step": self.step,
            "start_ns": time.time_ns(),
            "parents": [s["name"] for s in stack],
            "model": getattr(_local, "model", None),
        }
        _local.stack = [*stack, self._truth]
        return enter(self)

    def timed_exit(self, *exc):
        result = exit_(self, *exc)
        self._truth["end_ns"] = time.time_ns()
        _local.stack = _local.stack[:-1]
        RECORDS.append(self._truth)
        return result

    profiling.ProfilingContext.__enter__ = timed_enter
    profiling.ProfilingContext.__exit__ = timed_exit

    logps = grpo_trainer.GRPOTrainer._get_per_token_logps_and_entropies

    def which_model(self, model, *args, **kwargs):
        _local.model = "ref" if model is getattr(self, "ref_model", None) else "actor"
        try:
            return logps(self, model, *args, **kwargs)
        finally:
            _local.model = None

    grpo_trainer.GRPOTrainer._get_per_token_logps_and_entropies = which_model

    save = grpo_trainer.GRPOTrainer._save_checkpoint

    def timed_save(self, *args, **kwargs):
        rec = {"name": "Trainer._save_checkpoint", "step": self.state.global_step,
               "start_ns": time.time_ns(), "parents": [], "model": None}
        try:
            return save(self, *args, **kwargs)
        finally:
            rec["end_ns"] = time.time_ns()
            RECORDS.append(rec)

    grpo_trainer.GRPOTrainer._save_checkpoint = timed_save


def wrap_collectives() -> None:
    """Record every outermost torch.distributed collective call on this rank: its kind and
    epoch-ns interval, numbered per rank in call order (every rank calls them in one order,
    so the n-th call of each rank is one instance)."""
    import torch.distributed as dist

    def timed(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(_local, "in_collective", False):
                return fn(*args, **kwargs)
            _local.in_collective = True
            start = time.time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                _local.in_collective = False
                COLLECTIVES.append({"coll": name, "index": len(COLLECTIVES),
                                    "start_ns": start, "end_ns": time.time_ns()})
        return call

    for name in WRAPPED_COLLECTIVES:
        setattr(dist, name, timed(name, getattr(dist, name)))


def main(out: Path) -> None:
    check_pins()
    torch.set_num_threads(1)
    from datasets import Dataset
    from torch.profiler import ProfilerActivity, profile, schedule
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    wrap_trl_timers()
    wrap_collectives()
    tokenizer = build_tokenizer()
    g = torch.Generator().manual_seed(SEED)
    ab = torch.randint(0, 100, (64, 2), generator=g).tolist()
    dataset = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in ab]})
    trace = out / "profile" / f"rank{rank}.pt.trace.json.gz"
    steps: list[dict[str, Any]] = []

    class TorchProfilerCallback(TrainerCallback):
        """Steps a torch.profiler schedule once per optimizer step (what a TRL user writes)."""

        def on_train_begin(self, args, state, control, **kw):
            trace.parent.mkdir(parents=True, exist_ok=True)
            self.prof = profile(
                activities=[ProfilerActivity.CPU],
                record_shapes=False,
                with_stack=False,
                schedule=schedule(
                    wait=PROFILE_WAIT, warmup=PROFILE_WARMUP, active=PROFILE_ACTIVE, repeat=1
                ),
                on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
            )
            self.prof.start()

        def on_step_begin(self, args, state, control, **kw):
            steps.append({"step": state.global_step + 1, "start_ns": time.time_ns()})

        def on_step_end(self, args, state, control, **kw):
            steps[-1]["end_ns"] = time.time_ns()
            self.prof.step()

        def on_train_end(self, args, state, control, **kw):
            self.prof.stop()

    with tempfile.TemporaryDirectory(prefix="rlperf-trl-") as tmp:
        model_dir = Path(tmp) / "tiny-llama"
        build_model(tokenizer).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        config = GRPOConfig(
            output_dir=tmp, use_cpu=True, seed=SEED, data_seed=SEED, max_steps=MAX_STEPS,
            per_device_train_batch_size=GROUP * PROMPTS_PER_RANK, num_generations=GROUP,
            max_completion_length=MAX_NEW, temperature=1.0, beta=0.04, learning_rate=3e-3,
            logging_steps=1, report_to=[], save_strategy="steps", save_steps=SAVE_EVERY,
            save_only_model=True, dataloader_num_workers=0, disable_tqdm=True,
            ddp_backend="gloo", model_init_kwargs={"dtype": torch.float32},
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            processing_class=tokenizer,
            reward_funcs=arithmetic_reward,
            args=config,
            train_dataset=dataset,
            callbacks=[TorchProfilerCallback()],
        )
        trainer.train()
        history = trainer.state.log_history
        if rank == 0:
            last = max(Path(tmp).glob("checkpoint-*/trainer_state.json"),
                       key=lambda p: int(p.parent.name.split("-")[1]))
            (out / "logs").mkdir(parents=True, exist_ok=True)
            (out / "logs" / "trainer_state.json").write_text(last.read_text())
    (out / f"timers_rank{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "world_size": world,
                "pid": os.getpid(),
                "host": os.uname().nodename,
                "trace": str(trace.relative_to(out)),
                "records": RECORDS,
                "steps": steps,
                "lengths": LENGTHS,
                "collectives": COLLECTIVES,
                "log_history": history if rank == 0 else None,
            }
        )
    )


if __name__ == "__main__":
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    main(Path(sys.argv[1]))
