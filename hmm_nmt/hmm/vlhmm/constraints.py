"""VL-HMM emission constraints: word partitions (Brown clusters), the blocked or uniform state support
C_x of every word, and state dropout (Chiu & Rush, Sec. 4.2-4.3; notation in :mod:`hmm_nmt.hmm.vlhmm`)."""
from typing import NamedTuple, Optional, Sequence

import torch
import torch.nn as nn
from torch import Tensor


# ------------------------------------------------------------------------------------------------
# word partitions
def read_word_clusters(path: str, symbols: Sequence[str], never: Sequence[int] = ()):
    """Word partition rho from a file of ``word cluster`` lines (Brown clusters; the cluster is any string).

    Returns ``(word_cluster (V,) long, num_clusters)``; the symbols listed in ``never`` (padding, BOS) get
    -1 (never emitted); symbols absent from the file are spread over the clusters round robin (so the
    special symbols and words the clustering did not see are still emittable). A malformed line raises
    ``ValueError`` naming the file and line.
    """
    cluster_of, names = {}, {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'word cluster', got {line.rstrip()!r}")
            word, name = parts
            cluster_of[word] = names.setdefault(name, len(names))
    if not names:
        raise ValueError(f"{path}: no 'word cluster' lines")
    never = set(int(i) for i in never)
    out, spill = [], 0
    for i, sym in enumerate(symbols):
        if i in never:
            out.append(-1)
        elif sym in cluster_of:
            out.append(cluster_of[sym])
        else:
            out.append(spill % len(names))
            spill += 1
    return torch.tensor(out, dtype=torch.long), len(names)


class Restriction(NamedTuple):
    """The states one batch uses (all of them without dropout).

    kept (N,) global state ids (sorted); pos (G, n) positions inside the support rows that survive; local
    (G, n) index of those states in ``kept``; valid (G, n) False on padding of variable-size sets.
    """
    kept: Tensor
    pos: Tensor
    local: Tensor
    valid: Tensor


class Constraints(nn.Module):
    """Emission support sets C_x, as ``support`` (G, k) global state ids per word group and ``word_group``
    (V,) (-1: the symbol is never emitted). Brown: the groups are the clusters, C_c = the k states c k ..
    c k + k - 1 (``blocked``). Uniform: every word is its own group with a random k-subset.
    Buffers, so a checkpoint carries the partition it was trained with.
    """

    def __init__(self, support: Tensor, word_group: Tensor, num_states: int, blocked: bool):
        super().__init__()
        self.register_buffer("support", support.long())
        self.register_buffer("word_group", word_group.long())
        self.num_states = num_states
        self.blocked = blocked
        # emittable words sorted by group, and the group sizes (blocked emissions)
        emittable = torch.nonzero(word_group >= 0).flatten()
        order = emittable[torch.sort(word_group[emittable], stable=True).indices]
        self.register_buffer("word_order", order)
        self.group_sizes = torch.bincount(word_group[emittable], minlength=support.size(0)).tolist()

    def grouped_words(self):
        return self.word_order, self.group_sizes

    @property
    def k(self):
        return self.support.size(1)

    @classmethod
    def brown(cls, word_cluster: Tensor, num_clusters: int, states_per_cluster: int):
        k = states_per_cluster
        support = torch.arange(num_clusters * k).view(num_clusters, k)
        return cls(support, word_cluster, num_clusters * k, blocked=True)

    @classmethod
    def uniform(cls, emittable: Tensor, num_states: int, support_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        idx = torch.nonzero(emittable).flatten()
        support = torch.stack([torch.randperm(num_states, generator=g)[:support_size].sort().values
                               for _ in range(len(idx))]) if len(idx) else torch.zeros(0, support_size)
        word_group = torch.full((emittable.numel(),), -1, dtype=torch.long)
        word_group[idx] = torch.arange(len(idx))
        return cls(support, word_group, num_states, blocked=False)

    def state_partition(self) -> Tensor:
        """pi: the partition of every state (Brown: its cluster; uniform: z // k, used only to share the
        partition half of the factored embeddings)."""
        return torch.arange(self.num_states, device=self.support.device) // self.k

    def restrict(self, dropout: float = 0.0, generator: Optional[torch.Generator] = None) -> Restriction:
        """All states (``dropout`` 0) or a state-dropout sample (Algorithm 1)."""
        dev = self.support.device
        G, k = self.support.shape
        if dropout <= 0:
            pos = torch.arange(k, device=dev).expand(G, k)
            return Restriction(torch.arange(self.num_states, device=dev), pos, self.support,
                               torch.ones(G, k, dtype=torch.bool, device=dev))
        if not 0 < dropout < 1:
            raise ValueError(f"state dropout must be in [0, 1), got {dropout}")
        if self.blocked:
            n = max(1, int(round(k * (1 - dropout))))
            pos = torch.rand(G, k, generator=generator).argsort(1)[:, :n].sort(1).values.to(dev)
            kept = self.support.gather(1, pos).flatten()
            local = torch.arange(G * n, device=dev).view(G, n)
            return Restriction(kept, pos, local, torch.ones(G, n, dtype=torch.bool, device=dev))
        N = max(1, int(round(self.num_states * (1 - dropout))))
        kept = torch.randperm(self.num_states, generator=generator)[:N].sort().values.to(dev)
        to_local = torch.full((self.num_states,), -1, dtype=torch.long, device=dev)
        to_local[kept] = torch.arange(N, device=dev)
        loc = to_local[self.support]  # (G, k)
        valid = loc >= 0
        n = max(1, int(valid.sum(1).max()))
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :n]  # kept members first
        pos = order
        valid = valid.gather(1, order)
        local = loc.gather(1, order).clamp(min=0)
        return Restriction(kept, pos, local, valid)
