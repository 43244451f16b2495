"""Exact tree edit distance: a general Zhang-Shasha, and a fast exact solver for table trees.

Tree edit distance (TED) is the least total cost of node deletions, insertions and renames that
turns one ordered tree into another; equivalently the cheapest *mapping* between the trees that
keeps ancestor and left-to-right order (mapped pairs cost their rename, unmapped nodes cost a
delete or an insert).

* ``zhang_shasha(a, b, rename)`` solves any pair of ordered trees (Zhang and Shasha, 1989) in
  pure Python: O(|A| |B| min(depth, leaves)^2). It is the reference the fast path is tested
  against.
* ``tree_distance(lml_a, lml_b, cost)`` solves any pair of ordered trees given in postorder
  (Zhang-Shasha with every forest-table row vectorised over all keyroots of the other tree):
  the PubTabNet TEDS convention, whose trees keep thead/tbody and inline tags, uses it.
* ``table_tree_distance(rows_a, rows_b, cell_cost)`` solves the trees TEDS builds: a ``table``
  root, ``tr`` children, leaf ``td``/``th`` grandchildren. Because every tree has that shape, the
  Zhang-Shasha forest recursion only ever visits *postorder prefixes* of the row forest and the
  cell sequences of single rows, so the whole distance is two vectorised Levenshtein-style
  dynamic programmes over numpy arrays, O(|A| |B|) work with a few numpy calls per node.

Costs of the table solver (PubTabNet TEDS): insert and delete 1; rename ``table``->``table`` and
``tr``->``tr`` 0; ``tr``<->cell 1 (the tags differ); cell->cell ``cell_cost[i, j]``, in [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Node:
    """An ordered tree node for ``zhang_shasha``."""

    label: Any
    children: list[Node] = field(default_factory=list)


def _postorder(root: Node) -> tuple[list[Node], list[int]]:
    """Nodes in postorder and, per node, the postorder index of its leftmost leaf descendant."""
    nodes: list[Node] = []
    lml: list[int] = []
    stack: list[list[Any]] = [[root, 0, -1]]  # node, next child, leftmost leaf (once known)
    while stack:
        top = stack[-1]
        node, k = top[0], top[1]
        if k < len(node.children):
            top[1] += 1
            stack.append([node.children[k], 0, -1])
            continue
        stack.pop()
        index = len(nodes)
        nodes.append(node)
        lml.append(top[2] if node.children else index)
        if stack and stack[-1][2] == -1:
            stack[-1][2] = lml[index]
    return nodes, lml


def _keyroots(lml: list[int]) -> list[int]:
    """The highest node for each distinct leftmost leaf (Zhang-Shasha's LR keyroots), ascending."""
    highest: dict[int, int] = {}
    for i, leaf in enumerate(lml):
        highest[leaf] = i
    return sorted(highest.values())


def zhang_shasha(a: Node, b: Node, rename: Callable[[Any, Any], float],
                 insert_cost: float = 1.0, delete_cost: float = 1.0) -> float:
    """Exact tree edit distance between ordered trees ``a`` and ``b`` (Zhang-Shasha).

    ``rename(label_a, label_b)`` is the cost of mapping one node onto the other; inserting or
    deleting a node costs ``insert_cost`` / ``delete_cost``.
    """
    nodes_a, la = _postorder(a)
    nodes_b, lb = _postorder(b)
    labels_a = [n.label for n in nodes_a]
    labels_b = [n.label for n in nodes_b]
    td = [[0.0] * len(nodes_b) for _ in nodes_a]
    for i in _keyroots(la):
        li = la[i]
        for j in _keyroots(lb):
            lj = lb[j]
            rows, cols = i - li + 2, j - lj + 2
            fd = [[0.0] * cols for _ in range(rows)]
            for x in range(1, rows):
                fd[x][0] = fd[x - 1][0] + delete_cost
            for y in range(1, cols):
                fd[0][y] = fd[0][y - 1] + insert_cost
            for x in range(1, rows):
                ia = li + x - 1
                on_path_a = la[ia] == li
                row, above = fd[x], fd[x - 1]
                for y in range(1, cols):
                    jb = lj + y - 1
                    best = min(above[y] + delete_cost, row[y - 1] + insert_cost)
                    if on_path_a and lb[jb] == lj:
                        best = min(best, above[y - 1] + rename(labels_a[ia], labels_b[jb]))
                        row[y] = best
                        td[ia][jb] = best
                    else:
                        row[y] = min(best, fd[la[ia] - li][lb[jb] - lj] + td[ia][jb])
    return td[-1][-1]


def _row_pair_distances(p: np.ndarray, q: np.ndarray, cell_cost: np.ndarray) -> np.ndarray:
    """``E[i, j]``: edit distance between the cell sequences of row i of A and row j of B.

    Weighted Levenshtein (indel 1, substitution ``cell_cost``), every row pair at once: the DP
    state is an (A rows, B rows, cells of B + 1) array advanced one A cell at a time; B rows are
    padded to the longest one (padding only lies to the right of the value read, so it never
    leaks in) and each A row's result is taken when its last cell has been consumed.
    """
    m, n = len(p), len(q)
    E = np.empty((m, n))
    E[p == 0, :] = q[None, :]
    big_p, big_q = int(p.max(initial=0)), int(q.max(initial=0))
    if m == 0 or n == 0 or big_p == 0:
        return E
    starts_a = np.concatenate(([0], np.cumsum(p)[:-1]))
    starts_b = np.concatenate(([0], np.cumsum(q)[:-1]))
    k_b = np.arange(big_q)
    idx_b = np.where(k_b[None, :] < q[:, None], starts_b[:, None] + k_b[None, :], 0)  # (n, Q)
    ar = np.arange(big_q + 1, dtype=np.float64)
    chunk = max(1, 4_000_000 // max(1, big_p * n * (big_q + 1)))
    for lo in range(0, m, chunk):
        rows = np.arange(lo, min(m, lo + chunk))
        rows = rows[p[rows] > 0]
        if len(rows) == 0:
            continue
        k_a = np.arange(big_p)
        idx_a = np.where(k_a[None, :] < p[rows, None], starts_a[rows, None] + k_a[None, :], 0)  # (g, P)
        sub = cell_cost[idx_a[:, :, None, None], idx_b[None, None, :, :]]  # (g, P, n, Q)
        V = np.broadcast_to(ar, (len(rows), n, big_q + 1)).copy()
        Y = np.empty_like(V)
        last = q[None, :].repeat(len(rows), 0)
        for k in range(1, big_p + 1):
            Y[..., 0] = k
            np.minimum(V[..., 1:] + 1.0, V[..., :-1] + sub[:, k - 1], out=Y[..., 1:])
            Y -= ar
            np.minimum.accumulate(Y, axis=-1, out=V)
            V += ar
            done = p[rows] == k
            if done.any():
                E[rows[done]] = np.take_along_axis(V[done], last[done][..., None], axis=-1)[..., 0]
    return E


def _postorder_states(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the row forest in postorder (each row's cells, then the row): is-row flags, and for
    each node the postorder prefix left when its whole subtree is removed (1-based states)."""
    n_nodes = int(sizes.sum()) + len(sizes)
    is_row = np.zeros(n_nodes, dtype=bool)
    row_pos = np.cumsum(sizes + 1) - 1  # 0-based postorder index of each row node
    is_row[row_pos] = True
    states = np.arange(1, n_nodes + 1)
    without_subtree = states - 1
    without_subtree[row_pos] = row_pos - sizes  # state before the row's first cell
    return is_row, without_subtree


def table_tree_distance(rows_a: Sequence[int], rows_b: Sequence[int], cell_cost: np.ndarray) -> float:
    """Exact TED between two ``table -> tr -> cell`` trees.

    ``rows_a[i]`` is the number of cells in row i of tree A (0 for an empty ``<tr>``);
    ``cell_cost`` is the (cells of A) x (cells of B) rename cost matrix, cells numbered in
    document order. Costs as in the module docstring.

    Mapping the two roots onto each other is always optimal (any mapping that maps a root
    elsewhere, or leaves both roots out, can be rewritten to map them with no higher cost), so
    TED = forest distance between the two row forests. With v, w the rightmost roots of
    forests F, G, that distance obeys the Zhang-Shasha recursion

        d(F, G) = min(d(F - v, G) + 1, d(F, G - w) + 1,
                      d(F - T(v), G - T(w)) + d(children(v), children(w)) + rename(v, w)).

    In a forest of rows with leaf cells, F - v and F - T(v) are always postorder prefixes of the
    original forest (removing a row promotes its cells; removing a promoted cell drops it), so d
    is a (nodes A + 1) x (nodes B + 1) table over prefix pairs, of which only the previous row
    and the rows at row ends are kept. F - v is the previous prefix; for a row, F - T(v) is the
    prefix before its first cell. children-distance is the row-pair cell
    sequence distance ``E`` for two rows, the other row's cell count for a row against a cell,
    and 0 for two cells. Each table row is filled with one vectorised step: the deletion and
    diagonal terms elementwise, then the insertion chain ``D[s, t] = min_u Y[u] + (t - u)`` as
    a cumulative minimum of ``Y[u] - u``.
    """
    p = np.asarray(rows_a, dtype=np.int64)
    q = np.asarray(rows_b, dtype=np.int64)
    cell_cost = np.asarray(cell_cost, dtype=np.float64)
    if cell_cost.shape != (int(p.sum()), int(q.sum())):
        raise ValueError(f"cell_cost has shape {cell_cost.shape}, expected {(int(p.sum()), int(q.sum()))}")
    E = _row_pair_distances(p, q, cell_cost)
    row_b, back_b = _postorder_states(q)
    n_a, n_b = int(p.sum()) + len(p), len(row_b)
    if n_a == 0 or n_b == 0:
        return float(n_a + n_b)
    cell_b = ~row_b
    cells_b_cost = 1.0 + q  # a cell of A against a row of B: rename 1 + delete the row's cells

    ar = np.arange(n_b + 1, dtype=np.float64)
    # Only two kinds of earlier table rows are read: the previous one, and for a row node the
    # prefix just before its first cell (the end of the previous row): keep just those.
    row_ends = np.empty((len(p) + 1, n_b + 1))
    row_ends[0] = ar
    prev, cur = ar.copy(), np.empty(n_b + 1)
    diagonal = np.empty(n_b)  # rename + children distance against every node of B
    Y = np.empty(n_b + 1)
    s = 0
    cell_a = 0
    for i, size in enumerate(p):
        for node in range(size + 1):
            s += 1
            if node < size:  # a cell of row i, promoted to a root of the prefix forest
                diagonal[cell_b] = cell_cost[cell_a]
                diagonal[row_b] = cells_b_cost
                cell_a += 1
                base = prev
            else:  # row i itself
                diagonal[cell_b] = 1.0 + size
                diagonal[row_b] = E[i]
                base = row_ends[i]
            Y[0] = s
            np.minimum(prev[1:] + 1.0, base[back_b] + diagonal, out=Y[1:])
            Y -= ar
            np.minimum.accumulate(Y, out=cur)
            cur += ar
            prev, cur = cur, prev
        row_ends[i + 1] = prev
    return float(prev[n_b])


def postorder_leftmost(root: Node) -> tuple[list[Node], np.ndarray]:
    """Nodes of ``root``'s tree in postorder and, per node, the index of its leftmost leaf."""
    nodes, lml = _postorder(root)
    return nodes, np.asarray(lml, dtype=np.int64)


def _keyroot_segments(lml: np.ndarray) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """Zhang-Shasha forest tables of every keyroot of B laid side by side in one row.

    Keyroot j owns ``j - l(j) + 2`` consecutive positions: local column 0 (the empty forest) and one
    column per node ``l(j) .. j``. Returned as a view of all positions, and views per *level*: a
    keyroot's table reads the subtree distances of nodes off its leftmost path, which the tables of
    lower keyroots compute in the same row, so levels run in order (level k reads levels < k). Per view:
    its positions, their local column and segment key, and for its non-empty columns the node of
    B, whether it is on the keyroot's leftmost path, and the position of column ``l(node) - l(j)``
    (the forest left of the node's subtree)."""
    keyroots = _keyroots(lml.tolist())
    sizes = np.array([j - lml[j] + 2 for j in keyroots], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    seg = np.repeat(np.arange(len(keyroots)), sizes)
    local = np.arange(int(sizes.sum())) - starts[seg]
    left = lml[np.asarray(keyroots, dtype=np.int64)][seg]  # l(j) of the segment
    node = np.where(local > 0, left + local - 1, 0)
    on_path = lml[node] == left
    back = starts[seg] + lml[node] - left
    keyroot_of = {}  # node -> index of the keyroot whose leftmost path holds it
    for k, j in enumerate(keyroots):
        for v in range(int(lml[j]), j + 1):
            if lml[v] == lml[j]:
                keyroot_of[v] = k
    level = np.zeros(len(keyroots), dtype=np.int64)
    for k, j in enumerate(keyroots):  # ascending: lower keyroots come first
        deps = [level[keyroot_of[v]] + 1 for v in range(int(lml[j]), j + 1) if lml[v] != lml[j]]
        level[k] = max(deps, default=0)

    def view(pos: np.ndarray) -> dict[str, np.ndarray]:
        inner = pos[local[pos] > 0]
        return {"pos": pos, "local": local[pos].astype(np.float64), "key": -seg[pos].astype(np.float64),
                "inner": np.searchsorted(pos, inner), "node": node[inner], "on_path": on_path[inner],
                "back": back[inner], "prev": inner - 1, "path_pos": inner[on_path[inner]],
                "path_node": node[inner][on_path[inner]]}

    levels = [view(np.flatnonzero(level[seg] == lv)) for lv in range(int(level.max()) + 1)]
    return view(np.arange(len(seg))), levels


def _forest_row(view: dict[str, np.ndarray], prev: np.ndarray, diagonal: np.ndarray) -> np.ndarray:
    """One forest-table row on a view's positions: min(delete, diagonal), then the insertion
    chain as a cumulative minimum of ``Y[u] - u`` per segment (complex pairs (segment key,
    value) compare lexicographically, and keys decrease, so no segment leaks into the next)."""
    row = prev[view["pos"]] + 1.0
    row[view["inner"]] = np.minimum(row[view["inner"]], diagonal)
    z = np.empty(len(row), dtype=np.complex128)
    z.real = view["key"]
    z.imag = row - view["local"]
    np.minimum.accumulate(z, out=z)
    return z.imag + view["local"]


def tree_distance(lml_a: np.ndarray, lml_b: np.ndarray, cost: np.ndarray) -> float:
    """Exact tree edit distance between two ordered trees given in postorder.

    ``lml_x[i]``: postorder index of the leftmost leaf below node i (``postorder_leftmost``);
    ``cost[i, j]``: rename cost of node i of A onto node j of B; insert and delete cost 1.

    Zhang-Shasha (the recursion of ``zhang_shasha``, same results), with each forest-table row
    computed for every keyroot of B at once: the keyroots' tables sit side by side in one numpy
    row, the deletion and diagonal terms are elementwise and the insertion chain is a segmented
    cumulative minimum (``_forest_row``). Rows of nodes on a keyroot's leftmost path run level by
    level (``_keyroot_segments``). Work O(|A| |B| depth_A depth_B) in O(|A| depth_A) numpy steps.
    """
    lml_a = np.asarray(lml_a, dtype=np.int64)
    lml_b = np.asarray(lml_b, dtype=np.int64)
    n_a, n_b = len(lml_a), len(lml_b)
    cost = np.asarray(cost, dtype=np.float64)
    if cost.shape != (n_a, n_b):
        raise ValueError(f"cost has shape {cost.shape}, expected {(n_a, n_b)}")
    if n_a == 0 or n_b == 0:
        return float(n_a + n_b)
    full, levels = _keyroot_segments(lml_b)
    local = full["local"]
    width = len(local)
    td = np.zeros((n_a, n_b))
    for i in _keyroots(lml_a.tolist()):
        li = int(lml_a[i])
        fd = np.empty((i - li + 2, width))
        fd[0] = local
        for x in range(1, i - li + 2):
            ia = li + x - 1
            prev = fd[x - 1]
            if lml_a[ia] != li:  # off the keyroot's leftmost path: every td it reads is known
                fd[x] = _forest_row(full, prev, fd[lml_a[ia] - li][full["back"]] + td[ia, full["node"]])
                continue
            for v in levels:  # on the path: subtree(ia) is the whole forest; fills td[ia, ...]
                diagonal = np.where(v["on_path"], prev[v["prev"]] + cost[ia, v["node"]],
                                    local[v["back"]] + td[ia, v["node"]])
                fd[x][v["pos"]] = _forest_row(v, prev, diagonal)
                td[ia, v["path_node"]] = fd[x][v["path_pos"]]
    return float(td[-1, -1])
