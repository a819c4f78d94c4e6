"""A minimum s-t cut on a small directed graph (Dinic's max-flow), for the partitioner.

The partitioner (partition.py) states which forward values the backward may recompute and what
saving each costs; this module only answers which edges a cheapest cut crosses. Capacities are
non-negative ints (bytes) or `INF`. Of the minimum cuts the one closest to the sink is returned:
the partitioner's nodes split into an "in" and an "out" half, so that cut saves the latest
values it can and recomputes as little as a cheapest cut allows.

Graphs here have a few thousand vertices; a level graph and blocking flow per phase (iterative,
no recursion: deep chains would overflow Python's stack) keeps that well under a second.
"""
from __future__ import annotations

from collections import deque
from typing import Dict, Hashable, List, Set, Tuple

INF = float("inf")


class FlowGraph:
    def __init__(self):
        self._index: Dict[Hashable, int] = {}
        self._head: List[List[int]] = []    # vertex -> edge ids leaving it
        self._to: List[int] = []
        self._cap: List[float] = []         # residual capacity; edge e ^ 1 is its reverse

    def _vertex(self, v: Hashable) -> int:
        i = self._index.get(v)
        if i is None:
            i = self._index[v] = len(self._head)
            self._head.append([])
        return i

    def add_edge(self, u: Hashable, v: Hashable, cap: float) -> None:
        a, b = self._vertex(u), self._vertex(v)
        self._head[a].append(len(self._to))
        self._to.append(b)
        self._cap.append(cap)
        self._head[b].append(len(self._to))
        self._to.append(a)
        self._cap.append(0)

    def min_cut(self, s: Hashable, t: Hashable) -> Tuple[float, Set[Hashable]]:
        """(cut value, the sink side): the vertices that can still reach `t` once the flow is
        maximal. The value is INF when every cut crosses an infinite edge."""
        src, dst = self._vertex(s), self._vertex(t)
        to, cap, head = self._to, self._cap, self._head
        flow = 0.0
        while True:
            level = [-1] * len(head)
            level[src] = 0
            queue = deque([src])
            while queue:
                u = queue.popleft()
                for e in head[u]:
                    if cap[e] > 0 and level[to[e]] < 0:
                        level[to[e]] = level[u] + 1
                        queue.append(to[e])
            if level[dst] < 0:
                break
            cursor = [0] * len(head)
            while True:
                pushed = self._augment(src, dst, level, cursor)
                if pushed == 0:
                    break
                if pushed == INF:
                    return INF, set(self._index)
                flow += pushed
        # sink side: vertices with a residual path to t (walk reverse residual edges from t)
        reach = [False] * len(head)
        reach[dst] = True
        queue = deque([dst])
        while queue:
            v = queue.popleft()
            for e in head[v]:
                # e leaves v; its reverse e ^ 1 goes to[e] -> v with residual cap[e ^ 1]
                u = to[e]
                if not reach[u] and cap[e ^ 1] > 0:
                    reach[u] = True
                    queue.append(u)
        names = {i: v for v, i in self._index.items()}
        return flow, {names[i] for i, r in enumerate(reach) if r}

    def _augment(self, src: int, dst: int, level: List[int], cursor: List[int]) -> float:
        """One augmenting path along the level graph (iterative DFS); the bottleneck pushed."""
        to, cap, head = self._to, self._cap, self._head
        path: List[int] = []
        u = src
        while True:
            if u == dst:
                pushed = min(cap[e] for e in path)
                if pushed == INF:
                    return INF
                for e in path:
                    cap[e] -= pushed
                    cap[e ^ 1] += pushed
                return pushed
            edges = head[u]
            while cursor[u] < len(edges):
                e = edges[cursor[u]]
                if cap[e] > 0 and level[to[e]] == level[u] + 1:
                    break
                cursor[u] += 1
            else:
                if not path:
                    return 0
                level[u] = -1              # dead end: prune it for this phase
                e = path.pop()
                u = to[e ^ 1]
                cursor[u] += 1
                continue
            path.append(edges[cursor[u]])
            u = to[edges[cursor[u]]]
