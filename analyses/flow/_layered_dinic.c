/* Dinic's maximum flow on the dense layered graph of attention flow
 * (Abnar & Zuidema 2020), float64 capacities, no graph is ever materialised.
 *
 * Nodes (l, p), l = 0..L, p = 0..n-1. Edge (l, p) -> (l+1, q) has capacity
 * capT[l][p][q] (= Â_{l+1}[q, p]). One call solves the max flow for each
 * (source (0, src[k]), sink (L, snk[k])) pair. Forward arcs of a node are tried in
 * the order order[l][p][*] (descending capacity), so the blocking flows take the wide
 * edges first. A residual counts only when it exceeds eps; the value returned is
 * within (number of edges of a cut) * eps of the exact maximum flow.
 *
 * Workspace (caller-owned, zeroed once): ft, gt [L*n*n] doubles, touched [L*n*n]
 * ints, mark [L*n*n] bytes, dist/it [(L+1)*n] ints, queue [(L+1)*n] ints.
 */
#include <string.h>
#include <stddef.h>

typedef struct {
    int L, n, s_pos, t_pos;
    const double *capT;
    const int *order;
    double *ft, *gt, eps;
    int *dist, *it, *queue, *touched, n_touched, maxd[64], n_unfound[64], *unfound, n_alive[64], *alive, *alive_at, list_mode;
    unsigned char *mark;
} ctx_t;

#define IDX(c, l, a, b) (((size_t)(l) * (c)->n + (a)) * (c)->n + (b))

static inline int n_of(const ctx_t *c) { return c->n; }

static int n_arcs(const ctx_t *c, int l) {
    int nf = (l == c->L) ? 0 : (l == c->L - 1 ? 1 : c->n);
    int nb = (l == 0) ? 0 : (l == 1 ? 1 : c->n);
    return nf + nb;
}

/* arc a of node (l, p): returns the neighbour's layer/position and the residual */
static inline double arc(const ctx_t *c, int l, int p, int a, int *vl, int *vp) {
    int n = c->n, nf = (l == c->L) ? 0 : (l == c->L - 1 ? 1 : n);
    if (a < nf) {
        int q = (l == c->L - 1) ? c->t_pos : c->order[IDX(c, l, p, a)];
        size_t e = IDX(c, l, p, q);
        *vl = l + 1; *vp = q;
        return c->capT[e] - c->ft[e];
    }
    a -= nf;
    int q = (l == 1) ? c->s_pos : a;
    *vl = l - 1; *vp = q;
    return c->gt[IDX(c, l - 1, p, q)];
}

static inline void push(ctx_t *c, int l, int p, int vl, int q, double d) {
    size_t e, g;
    if (vl == l + 1) { e = IDX(c, l, p, q); g = IDX(c, l, q, p); c->ft[e] += d; c->gt[g] += d; }
    else { e = IDX(c, vl, q, p); g = IDX(c, vl, p, q); c->ft[e] -= d; c->gt[g] -= d;
           if (c->ft[e] < 0) { c->ft[e] = 0; c->gt[g] = 0; } }
    if (!c->mark[e]) { c->mark[e] = 1; c->touched[c->n_touched++] = (int)e; }
}

/* Breadth-first levels in the residual graph. Each layer keeps a list of its nodes not
 * yet found, so a node looks only at those (its arcs to found nodes cannot matter). */
static int bfs(ctx_t *c) {
    int L = c->L, n = c->n, head = 0, tail = 0, t_dist = -1;
    for (int l = 0; l <= L; l++) {
        c->maxd[l] = -1; c->n_unfound[l] = n;
        for (int q = 0; q < n; q++) { c->dist[l * n + q] = -1; c->unfound[l * n + q] = q; }
    }
    c->dist[c->s_pos] = 0; c->queue[tail++] = c->s_pos; c->maxd[0] = 0;
    while (head < tail) {
        int u = c->queue[head++], l = u / n, p = u % n, du = c->dist[u];
        if (t_dist >= 0 && du >= t_dist) break;
        if (l == L - 1) {  /* the one arc into the sink */
            size_t e = IDX(c, l, p, c->t_pos);
            int v = L * n + c->t_pos;
            if (c->dist[v] < 0 && c->capT[e] - c->ft[e] > c->eps) {
                c->dist[v] = du + 1; c->maxd[L] = du + 1; t_dist = du + 1; c->queue[tail++] = v;
            }
        } else if (l < L - 1) {
            int *uf = c->unfound + (size_t)(l + 1) * n;
            for (int k = 0; k < c->n_unfound[l + 1];) {
                int q = uf[k];
                size_t e = IDX(c, l, p, q);
                if (c->capT[e] - c->ft[e] > c->eps) {
                    int v = (l + 1) * n + q;
                    c->dist[v] = du + 1; c->queue[tail++] = v;
                    if (du + 1 > c->maxd[l + 1]) c->maxd[l + 1] = du + 1;
                    uf[k] = uf[--c->n_unfound[l + 1]];
                } else k++;
            }
        }
        if (l >= 2 && l < L) {  /* back along arcs that carry flow into u */
            int *uf = c->unfound + (size_t)(l - 1) * n;
            for (int k = 0; k < c->n_unfound[l - 1];) {
                int q = uf[k];
                if (c->gt[IDX(c, l - 1, p, q)] > c->eps) {
                    int v = (l - 1) * n + q;
                    c->dist[v] = du + 1; c->queue[tail++] = v;
                    if (du + 1 > c->maxd[l - 1]) c->maxd[l - 1] = du + 1;
                    uf[k] = uf[--c->n_unfound[l - 1]];
                } else k++;
            }
        }
    }
    for (int l = 0; l <= L; l++) c->n_alive[l] = 0;
    for (int k = 0; k < tail; k++) {
        int v = c->queue[k], l = v / n;
        c->alive_at[v] = c->n_alive[l];
        c->alive[l * n + c->n_alive[l]++] = v % n;
    }
    return t_dist >= 0;
}

static void kill(ctx_t *c, int l, int p) {
    int u = l * n_of(c) + p, k = c->alive_at[u], last = c->alive[l * n_of(c) + --c->n_alive[l]];
    c->alive[l * n_of(c) + k] = last;
    c->alive_at[l * n_of(c) + last] = k;
    c->dist[u] = -2;  /* dead for this phase */
}

static double dfs(ctx_t *c, int l, int p, double f) {
    int n = c->n;
    if (l == c->L) return f;
    int u = l * n + p, na = n_arcs(c, l), nf = (l == c->L - 1) ? 1 : n;
    double pushed = 0;
    if (c->list_mode && nf == n && c->it[u] < nf && c->n_alive[l + 1] * 4 < nf - c->it[u]) {
        /* few nodes of the next layer are still alive: look at those only */
        int *al = c->alive + (size_t)(l + 1) * n;
        for (int k = 0; k < c->n_alive[l + 1]; k++) {
            int q = al[k];
            if (c->dist[(l + 1) * n + q] != c->dist[u] + 1) continue;
            size_t e = IDX(c, l, p, q);
            double r = c->capT[e] - c->ft[e];
            if (r <= c->eps) continue;
            double want = f - pushed;
            double d = dfs(c, l + 1, q, want < r ? want : r);
            if (d > 0) {
                push(c, l, p, l + 1, q, d);
                pushed += d;
                if (f - pushed <= c->eps) return pushed;
            }
            if (k < c->n_alive[l + 1] && al[k] != q) k--;  /* q was removed: look at k again */
        }
        c->it[u] = nf;
    }
    for (; c->it[u] < na; c->it[u]++) {
        int a = c->it[u], vl, vp;
        if (a == nf && l > 0) {  /* backward arcs: useless unless the layer below holds dist + 1 */
            if (c->maxd[l - 1] < c->dist[u] + 1) { c->it[u] = na; break; }
        }
        if (a < nf && nf == n) {  /* forward, before reading the capacity */
            int q = c->order[IDX(c, l, p, a)];
            if (c->dist[(l + 1) * n + q] != c->dist[u] + 1) continue;
        }
        double r = arc(c, l, p, a, &vl, &vp);
        if (r <= c->eps || c->dist[vl * n + vp] != c->dist[u] + 1) continue;
        double want = f - pushed;
        double d = dfs(c, vl, vp, want < r ? want : r);
        if (d > 0) {
            push(c, l, p, vl, vp, d);
            pushed += d;
            if (f - pushed <= c->eps) return pushed;
        }
    }
    kill(c, l, p);
    return pushed;
}

int layered_max_flows(int L, int n, const double *capT, const int *order, int n_pairs,
                      const int *src, const int *snk, double eps, double *out,
                      double *ft, double *gt, int *touched, unsigned char *mark,
                      int *dist, int *it, int *queue, int *unfound, int *alive, int *alive_at) {
    if (L + 1 > 64) return -1;
    ctx_t c = {L, n, 0, 0, capT, order, ft, gt, eps, dist, it, queue, touched, 0, {0}, {0}, unfound, {0}, alive, alive_at, 1, mark};
    for (int k = 0; k < n_pairs; k++) {
        c.s_pos = src[k];  /* node (0, src): flat id src */
        c.t_pos = snk[k];  /* node (L, snk) */
        double total = 0, f, out_cap = 0, in_cap = 0;
        for (int q = 0; q < n; q++) {
            out_cap += capT[IDX(&c, 0, c.s_pos, q)];
            in_cap += capT[IDX(&c, L - 1, q, c.t_pos)];
        }
        /* no cut is smaller than min(out_cap, in_cap) allows: stop once it is reached */
        double bound = (out_cap < in_cap ? out_cap : in_cap) - eps;
        c.list_mode = 1;
        while (total < bound && bfs(&c)) {
            double before = total;
            memset(c.it, 0, sizeof(int) * (size_t)(L + 1) * n);
            while (total < bound && (f = dfs(&c, 0, c.s_pos, bound + eps - total)) > 0) total += f;
            /* the list scan may skip a node moved by a removal deeper down; a phase that
               found a path but pushed nothing is redone with the plain arc order */
            c.list_mode = total > before;
        }
        out[k] = total;
        for (int e = 0; e < c.n_touched; e++) {
            size_t ee = (size_t)touched[e];
            size_t l = ee / ((size_t)n * n), rem = ee % ((size_t)n * n), p = rem / n, q = rem % n;
            ft[ee] = 0; gt[(l * n + q) * n + p] = 0; mark[ee] = 0;
        }
        c.n_touched = 0;
    }
    return 0;
}
