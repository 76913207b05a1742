"""PyTorch DDP with its Gloo backend: the reference of bench/dist.lua's data-parallel
epoch. Run under mpirun (it reads Open MPI's rank variables), one rank per process:

  mpirun -np 2 /usr/bin/python3 bench/torch_ddp.py epoch <images> <batch> [threads]
      -> rank 0 prints "ok <seconds>": one epoch of the 784-256-10 MLP (Adam, lr 1e-3)
         on this rank's shard of the first <images> Fashion-MNIST images, batch <batch>
         per rank, the slowest rank's time

The same work as `dlua bench/dist.lua epoch`: the data standardised once, five warm-up
steps, then the timed epoch; batches gathered with index_select (no DataLoader, whose
worker processes would only add to the time), gradients averaged by DDP's bucketed
allreduce, which overlaps the backward pass.
"""
import datetime
import os
import sys
import tempfile
import time

import torch
import torch.distributed as torch_dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402  (the data, the model and the thread settings of the other rows)


def rank_and_size():
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMIX_RANK", "PMIX_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def epoch(images, batch, threads):
    rank, size = rank_and_size()
    torch_ref.set_threads(threads)
    # The ranks meet through a file named after their job (Open MPI's namespace, unique
    # per mpirun job): a TCP port derived from the job could be taken, and one rank then
    # waited for the other until gloo's 30-minute timeout.
    job = os.environ.get("PMIX_NAMESPACE") or os.environ.get("OMPI_MCA_ess_base_jobid") or str(os.getppid())
    store = os.path.join(tempfile.gettempdir(), "dlua_torch_ddp_%s" % job)
    torch_dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=size,
                                  timeout=datetime.timedelta(seconds=120))
    x, y = torch_ref.train_data()
    x, y = x[:images].reshape(-1, 784).contiguous(), y[:images]
    torch.manual_seed(1)
    net = DistributedDataParallel(torch_ref.MLP())   # (broadcasts rank 0's parameters)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def shard(seed):
        # torch.utils.data.DistributedSampler's partition: a shuffle shared by the
        # ranks, padded to a multiple of the ranks, every size-th index from this rank's.
        g = torch.Generator()
        g.manual_seed(seed)
        perm = torch.randperm(images, generator=g)
        per = -(-images // size)
        perm = torch.cat([perm, perm[:per * size - images]])
        return perm[rank::size]

    def steps(idx, limit=None):
        for k, i in enumerate(range(0, idx.numel(), batch)):
            if limit is not None and k >= limit:
                break
            b = idx[i:i + batch]
            loss = F.cross_entropy(net(x.index_select(0, b)), y.index_select(0, b))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    steps(shard(0), limit=5)   # warm-up
    torch_dist.barrier()
    t0 = time.perf_counter()
    steps(shard(1))
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
    if rank == 0:
        print("ok %.9g" % t.item(), flush=True)
    torch_dist.destroy_process_group()
    if rank == 0:   # every rank has passed the all_reduce: none opens the store again
        try:
            os.remove(store)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "epoch":
        epoch(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    else:
        sys.exit(__doc__)
