"""lightning-thunder's DDP, as `python3 -m ddpsim_torch --wrap` drives it (tests/frameworks.sh): the module
under thunder.jit, then thunder.distributed.ddp (its documented order: ddp(thunder.jit(model))), on the gloo
group the front end made, on the CPU (thunder's torch executor). no_sync is ThunderModule.no_sync. This only
translates the interface; how gradients are synchronized is thunder's: ddp_v2's transform inserts each
gradient's pre-averaged all-reduce into the backward trace, and no_sync skips it (set_skip_data_parallel_grad_sync)
and syncs on exit (thunder/core/module.py: _sync_grads in no_sync's finally, thunder issue #1670; PR #2255, which
would sync at the next backward outside no_sync as PyTorch does, is in no release up to 0.2.6)."""


def ddp(module, **ddp_options):
    import thunder
    import thunder.distributed

    return thunder.distributed.ddp(thunder.jit(module))
