"""torch 2.x's FSDP1 (FullyShardedDataParallel) on CPU with gloo, through the front end.

  no_shard    sharding_strategy=NO_SHARD: every rank keeps whole parameters and gradients, the module's own
              (use_orig_params=True); FSDP1's no_sync accumulates them locally
  flat        the default: use_orig_params=False puts one FlatParameter in the module's place (refused: ddpsim
              compares parameter by parameter, by the module's names)
  orig_params FULL_SHARD with use_orig_params=True: each parameter a view of its slice of the rank's flat shard
              (refused: ddpsim compares whole tensors)
"""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

CPU = torch.device("cpu")


def no_shard(module):
    return FSDP(module, use_orig_params=True, device_id=CPU, sharding_strategy=ShardingStrategy.NO_SHARD)


def flat(module):
    return FSDP(module, use_orig_params=False, device_id=CPU)


def orig_params(module):
    return FSDP(module, use_orig_params=True, device_id=CPU)
