"""The check of a merged arm (train/checkpoints.py) against the tensors its config.json describes.

Every model a preset names is built on the meta device from its config.json values (memory.KNOWN_SHAPES) and
checked against a merge that holds exactly its tensors: a safetensors file whose header is the real one and whose
data is a sparse hole (no disk). A tiny random OLMo-2 goes through the real route: an FSDP2 checkpoint written by
verl's own checkpoint manager, verl's model merger, then the check. A parameter formula undercounted OLMo-2 (its
per-layer query and key norms) and failed that arm after a correct merge.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.train.checkpoints import MergeError, main, model_tensors, verify_merge
from crossed_rlvr.train.memory import KNOWN_SHAPES

ROOT = Path(__file__).resolve().parents[1]


def write_hollow_merge(folder: Path, config: dict, drop: tuple[str, ...] = (),
                       add: dict[str, tuple[int, ...]] | None = None) -> int:
    """config.json and a model.safetensors whose header lists the meta-built model's tensors (tied ones once) and
    whose data is a hole of the right length; returns the parameters written."""
    from transformers import AutoConfig

    folder.mkdir(parents=True)
    AutoConfig.for_model(**config).save_pretrained(folder)
    shapes, tied = model_tensors(folder)
    header, offset = {}, 0
    for name, shape in {**shapes, **(add or {})}.items():
        if name in tied or name in drop:
            continue
        size = 2 * math.prod(shape)  # bf16
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path = folder / "model.safetensors"
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head)
        fh.truncate(8 + len(head) + offset)  # sparse: the headers are read, never the data
    return offset // 2


@pytest.mark.parametrize("name", sorted(KNOWN_SHAPES))
def test_every_preset_model_verifies_against_its_own_tensors(name, tmp_path):
    shape = KNOWN_SHAPES[name]
    written = write_hollow_merge(tmp_path / "merged", shape.config())
    assert verify_merge(tmp_path / "merged") == written
    if shape.model_type == "olmo2":  # what the formula missed: a query and a key norm per layer
        assert written - shape.parameters() == shape.layers * 2 * shape.hidden == 262_144


def test_a_merge_missing_a_tensor_or_holding_another_is_refused_by_name(tmp_path):
    olmo = KNOWN_SHAPES["allenai/OLMo-2-1124-7B-Instruct"].config()
    write_hollow_merge(tmp_path / "a", olmo, drop=("model.layers.3.self_attn.k_norm.weight",))
    with pytest.raises(MergeError, match=r"missing: model\.layers\.3\.self_attn\.k_norm\.weight"):
        verify_merge(tmp_path / "a")
    qwen = KNOWN_SHAPES["Qwen/Qwen2.5-1.5B-Instruct"].config()
    write_hollow_merge(tmp_path / "b", qwen, add={"model.layers.28.mlp.up_proj.weight": (8960, 1536)})
    with pytest.raises(MergeError, match=r"not in the model: model\.layers\.28\.mlp\.up_proj\.weight"):
        verify_merge(tmp_path / "b")
    write_hollow_merge(tmp_path / "c", qwen, add={"model.norm.weight": (1535,)})
    with pytest.raises(MergeError, match=r"wrong shape: model\.norm\.weight \[1535\] \(config: \[1536\]\)"):
        verify_merge(tmp_path / "c")


# One process: a tiny random OLMo-2, sharded with FSDP2 on one gloo rank, saved by verl's FSDPCheckpointManager (as
# the actor saves a step) and merged by verl's model merger (as the launch script does).
SAVE_AND_MERGE = """
import os, sys, torch, torch.distributed as dist
from pathlib import Path
from omegaconf import OmegaConf
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer, Olmo2Config
from verl.model_merger.base_model_merger import ModelMergerConfig
from verl.model_merger.fsdp_model_merger import FSDPModelMerger
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

shards, merged, tokenizer, store = (Path(a) for a in sys.argv[1:5])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)  # no port to pick
torch.manual_seed(0)
config = Olmo2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                     architectures=["Olmo2ForCausalLM"])
model = AutoModelForCausalLM.from_config(config)
mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
manager = FSDPCheckpointManager(model=model, optimizer=optimizer, lr_scheduler=None,
                                processing_class=AutoTokenizer.from_pretrained(tokenizer),
                                checkpoint_config=OmegaConf.create({"save_contents": ["model", "optimizer", "extra"],
                                                                    "load_contents": ["model"], "async_save": False}))
manager.save_checkpoint(str(shards), global_step=1)
dist.destroy_process_group()
FSDPModelMerger(ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(shards), target_dir=str(merged),
                                  hf_model_config_path=str(shards / "huggingface"))).merge_and_save()
print(sum(p.numel() for p in model.parameters()))
"""


@pytest.mark.long
def test_a_tiny_olmo2_merged_by_verl_passes_and_frees_its_optimizer_state(tmp_path, capsys):
    from crossed_rlvr.policies.tiny import build_tiny_model

    build_tiny_model(tmp_path / "tokenizer")
    shards, merged = tmp_path / "global_step_1" / "actor", tmp_path / "step-1"
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "crossed_rlvr.train.verl_compat,crossed_rlvr.train.verl_cpu",
           "VERL_PLATFORM": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SAVE_AND_MERGE, str(shards), str(merged), str(tmp_path / "tokenizer"),
                           str(tmp_path / "store")], capture_output=True, text=True, timeout=300, check=False, env=env,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parameters = int(proc.stdout.split()[-1])
    assert json.loads((merged / "config.json").read_text())["model_type"] == "olmo2"
    assert verify_merge(merged) == parameters  # the formula said 96 fewer: 2 layers x (32 + 16) norm weights
    assert main(["--merged", str(merged), "--shards", str(shards)]) == 0
    assert "merge verified" in capsys.readouterr().out
    assert not list(shards.glob("optim_world_size_*")) and list(shards.glob("model_world_size_*"))

