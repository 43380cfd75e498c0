/* pgdeploy.c — see pgdeploy.h. */
#include "pg/pgdeploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/reply.h"
#include "pg/pgplan.h"
#include "pg/pgwire.h"
#include "store/err.h"

#define PULL "pull"

/* A name's route: its live declarer (0: none) and how many draining
 * deployments declare it. */
typedef struct route {
    const char *name; /* into a pgdep's decl */
    uint32_t live;
    uint32_t n_draining;
} route;

static const char *tr_of(const char *tr)
{
    return tr && tr[0] ? tr : PULL;
}

/* ---- a deployment's row ---- */

static void dep_fini(pgdep *d)
{
    free(d->id);
    store_deployment_clear(&d->decl);
    memset(d, 0, sizeof *d);
}

/* A row of deployments_read, deploy_lock or deployments_list from col
 * (number, id, version, state, created_at, retired_at, decl). */
static int dep_read(const PGresult *res, int row, int col, pgdep *d)
{
    int32_t number, version, state;
    int64_t created = 0, retired = 0;
    const char *id;
    const uint8_t *decl;
    size_t id_len, decl_len;
    memset(d, 0, sizeof *d);
    if (pgwire_get_int4(res, row, col, &number) != BERTH_OK ||
        pgwire_get_text(res, row, col + 1, &id, &id_len) != BERTH_OK ||
        pgwire_get_int4(res, row, col + 2, &version) != BERTH_OK ||
        pgwire_get_int4(res, row, col + 3, &state) != BERTH_OK ||
        (!pgwire_isnull(res, row, col + 4) &&
         pgwire_get_int8(res, row, col + 4, &created) != BERTH_OK) ||
        (!pgwire_isnull(res, row, col + 5) &&
         pgwire_get_int8(res, row, col + 5, &retired) != BERTH_OK) ||
        pgwire_get_bytea(res, row, col + 6, &decl, &decl_len) != BERTH_OK || number <= 0 ||
        state < ENGINE_DEPLOYMENT_LIVE || state > ENGINE_DEPLOYMENT_RETIRED)
        return BERTH_ECORRUPT;
    if (store_deployment_decode(decl, decl_len, &d->decl) != BERTH_OK)
        return BERTH_ECORRUPT;
    if ((d->id = mem_alloc(id_len + 1)) == NULL) {
        store_deployment_clear(&d->decl);
        return BERTH_ENOMEM;
    }
    memcpy(d->id, id, id_len);
    d->id[id_len] = '\0';
    d->number = (uint32_t)number;
    d->version = (uint32_t)version;
    d->state = state;
    d->created_at_ms = (uint64_t)created;
    d->retired_at_ms = (uint64_t)retired;
    return BERTH_OK;
}

/* ---- the copy ---- */

int pgdeploy_init(pgdeploys *d)
{
    memset(d, 0, sizeof *d);
    return table_init(&d->routes);
}

static void routes_clear(pgdeploys *d)
{
    size_t i = 0;
    route *r;
    while ((r = table_next(&d->routes, &i)) != NULL)
        free(r);
    table_clear(&d->routes);
}

static void deps_clear(pgdeploys *d)
{
    routes_clear(d);
    for (size_t i = 0; i < d->v.n; i++)
        dep_fini(&d->v.v[i]);
    d->v.n = 0;
    d->n_draining = 0;
}

void pgdeploy_fini(pgdeploys *d)
{
    deps_clear(d);
    VEC_FREE(&d->v);
    table_fini(&d->routes);
}

static int routes_build(pgdeploys *d)
{
    routes_clear(d);
    d->n_draining = 0;
    for (size_t i = 0; i < d->v.n; i++) {
        const pgdep *dp = &d->v.v[i];
        d->n_draining += dp->state == ENGINE_DEPLOYMENT_DRAINING;
        if (dp->state == ENGINE_DEPLOYMENT_RETIRED)
            continue;
        for (size_t k = 0; k < dp->decl.n_channels; k++) {
            const char *name = dp->decl.channels[k].name;
            size_t len = strlen(name);
            route *r = table_get(&d->routes, name, len);
            if (r == NULL) {
                if ((r = mem_calloc(1, sizeof *r)) == NULL)
                    return BERTH_ENOMEM;
                r->name = name;
                if (table_put(&d->routes, name, len, r) != BERTH_OK) {
                    free(r);
                    return BERTH_ENOMEM;
                }
            }
            if (dp->state == ENGINE_DEPLOYMENT_LIVE)
                r->live = dp->number;
            else
                r->n_draining++;
        }
    }
    return BERTH_OK;
}

int pgdeploy_load(pgdeploys *d, const PGresult *res)
{
    int n = PQntuples(res);
    int64_t epoch;
    if (n < 1 || pgwire_get_int8(res, 0, 0, &epoch) != BERTH_OK)
        return BERTH_ECORRUPT;
    pgdeploys fresh;
    if (pgdeploy_init(&fresh) != BERTH_OK)
        return BERTH_ENOMEM;
    int rv = BERTH_OK;
    for (int i = 0; i < n && rv == BERTH_OK; i++) {
        if (pgwire_isnull(res, i, 1))
            continue; /* no deployment at all */
        pgdep *slot = VEC_ADD(&fresh.v);
        rv = slot == NULL ? BERTH_ENOMEM : dep_read(res, i, 1, slot);
        if (slot != NULL && rv != BERTH_OK)
            fresh.v.n--;
    }
    if (rv == BERTH_OK)
        rv = routes_build(&fresh);
    if (rv != BERTH_OK) {
        pgdeploy_fini(&fresh);
        return rv;
    }
    pgdeploy_fini(d);
    *d = fresh;
    d->loaded = true;
    d->epoch = epoch;
    return BERTH_OK;
}

int64_t pgdeploy_route(const pgdeploys *d, bool strict, const char *topic, engine_status *st)
{
    const route *r = table_get(&d->routes, topic, strlen(topic));
    if (r != NULL && r->live != 0)
        return r->live;
    if (r != NULL && r->n_draining > 0) {
        rules_route_draining(st, topic);
        return -1;
    }
    if (strict) {
        rules_route_undeclared(st, topic);
        return -1;
    }
    return 0;
}

static const pgdep *by_number(const pgdeploys *d, uint32_t number);

const char *pgdeploy_push(const pgdeploys *d, uint32_t number, const char *topic)
{
    const pgdep *dp = number != 0 ? by_number(d, number) : NULL;
    for (size_t i = 0; dp != NULL && i < dp->decl.n_channels; i++) {
        const store_channel *c = &dp->decl.channels[i];
        if (strcmp(c->name, topic) == 0)
            return check_transport(tr_of(c->transport)) == CHECK_TRANSPORT_PUSH ? c->transport
                                                                                : NULL;
    }
    return NULL;
}

bool pgdeploy_declared(const pgdeploys *d, const char *topic)
{
    return table_get(&d->routes, topic, strlen(topic)) != NULL;
}

static const pgdep *by_number(const pgdeploys *d, uint32_t number)
{
    size_t lo = 0, hi = d->v.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t n = d->v.v[mid].number;
        if (n == number)
            return &d->v.v[mid];
        if (n < number)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int pgdeploy_channel(const pgdeploys *d, uint32_t number, const char *topic, rules_channel *out)
{
    if (number == 0)
        return 0;
    const pgdep *dp = by_number(d, number);
    if (dp == NULL)
        return -1;
    for (size_t i = 0; i < dp->decl.n_channels; i++) {
        const store_channel *c = &dp->decl.channels[i];
        if (strcmp(c->name, topic) != 0)
            continue;
        *out = (rules_channel){.reply_max_bytes = c->reply_max_bytes,
                               .content_types = (char *const *)c->content_types,
                               .n_content_types = c->n_content_types};
        return 1;
    }
    return 0;
}

/* ---- a turn: planning ---- */

static bool is_change(const pgreq *p)
{
    return p->req.op == ENGINE_OP_DEPLOY || p->req.op == ENGINE_OP_RETIRE;
}

void pgdeploy_plan(pgops_turn *t, pgreq *p)
{
    engine_status *st = &p->reply->status;
    p->claim = -1;
    if (p->req.op == ENGINE_OP_DEPLOY) {
        const engine_channel *cs = p->req.u.deploy.channels;
        size_t n = p->req.u.deploy.n_channels;
        if (!rules_deploy_check(t->o, p->req.u.deploy.id, cs, n, st)) {
            p->settled = true;
            return;
        }
        t->deploys++;
    } else if (p->req.op == ENGINE_OP_RETIRE) {
        if (!check_topic(p->req.u.retire.id, "id", st)) {
            p->settled = true;
            return;
        }
        t->deploys++;
    } else {
        t->lists++;
    }
}

bool pgdeploy_in(const pgops_turn *t)
{
    return t->deploys > 0;
}

/* A LIST_DEPLOYMENTS' read each. */
static bool lists(pgops_turn *t)
{
    for (pgreq *p = t->list; p != NULL && t->lists > 0; p = p->next) {
        if (p->settled || p->req.op != ENGINE_OP_LIST_DEPLOYMENTS)
            continue;
        if ((p->claim = pgplan_add_stmt(t, "deployments_list", 16)) < 0)
            return false;
        pgwire_null(&t->params[p->claim], PGWIRE_INT4_ARRAY);
    }
    return true;
}

bool pgdeploy_stmt_first(pgops_turn *t)
{
    if (t->deploys > 0) {
        int s = pgplan_add_stmt(t, "deploy_lock", 16);
        if (s < 0)
            return false;
        t->s_dlock = s;
        if (t->routed)
            pgwire_int8(&t->params[s], t->deps->epoch);
        else
            pgwire_null(&t->params[s], PGWIRE_INT8);
    }
    return t->deploys > 0 || lists(t); /* (with deploys: after them, last) */
}

/* ---- a turn: the decisions ---- */

static void rows_free(pgops_turn *t)
{
    for (size_t i = 0; i < t->drows.n; i++)
        dep_fini(&t->drows.v[i]);
    VEC_FREE(&t->drows);
}

/* The newest version of id still kept, or NULL. */
static pgdep *latest(pgops_turn *t, const char *id)
{
    for (size_t i = t->drows.n; i-- > 0;)
        if (!t->drows.v[i].forgotten && strcmp(t->drows.v[i].id, id) == 0)
            return &t->drows.v[i];
    return NULL;
}

static bool same_types(const store_channel *c, const engine_channel *e)
{
    if (c->n_content_types != e->n_content_types)
        return false;
    for (size_t i = 0; i < c->n_content_types; i++)
        if (strcmp(c->content_types[i], e->content_types[i]) != 0)
            return false;
    return true;
}

/* d declares exactly cs (in order, pull spelt either way). */
static bool declares_exactly(const pgdep *d, const engine_channel *cs, size_t n)
{
    if (d->decl.n_channels != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        const store_channel *c = &d->decl.channels[i];
        if (strcmp(c->name, cs[i].name) != 0 ||
            strcmp(tr_of(c->transport), tr_of(cs[i].transport)) != 0 ||
            c->reply_max_bytes != cs[i].reply_max_bytes || !same_types(c, &cs[i]))
            return false;
    }
    return true;
}

/* The live version of another id than id that declares name, or NULL. */
static const pgdep *live_other(pgops_turn *t, const char *name, const char *id)
{
    for (size_t i = 0; i < t->drows.n; i++) {
        const pgdep *d = &t->drows.v[i];
        if (d->forgotten || d->state != ENGINE_DEPLOYMENT_LIVE || strcmp(d->id, id) == 0)
            continue;
        for (size_t k = 0; k < d->decl.n_channels; k++)
            if (strcmp(d->decl.channels[k].name, name) == 0)
                return d;
    }
    return NULL;
}

/* A retired version nothing names, that a newer version of its id stands
 * for in the listing. */
static bool forgettable(pgops_turn *t, size_t i)
{
    const pgdep *d = &t->drows.v[i];
    if (d->forgotten || d->inserted || d->state != ENGINE_DEPLOYMENT_RETIRED || d->named)
        return false;
    for (size_t k = i + 1; k < t->drows.n; k++)
        if (!t->drows.v[k].forgotten && strcmp(t->drows.v[k].id, d->id) == 0)
            return true;
    return false;
}

static size_t kept(const pgops_turn *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->drows.n; i++)
        n += !t->drows.v[i].forgotten;
    return n;
}

/* A new version of id declaring cs: its row, encoded and read back. */
static int new_row(pgops_turn *t, const char *id, uint32_t version, const engine_channel *cs,
                   size_t n, pgdep **out)
{
    store_channel sc[ENGINE_DEPLOY_CHANNELS_MAX];
    for (size_t i = 0; i < n; i++)
        sc[i] = (store_channel){.name = cs[i].name,
                                .transport = tr_of(cs[i].transport),
                                .reply_max_bytes = cs[i].reply_max_bytes,
                                .content_types = cs[i].content_types,
                                .n_content_types = cs[i].n_content_types};
    store_deployment r = {.id = id,
                          .version = version,
                          .state = STORE_DEPLOYMENT_LIVE,
                          .channels = sc,
                          .n_channels = n,
                          .created_at_ms = t->now_ms};
    store_buf buf = {0};
    int rv = store_deployment_encode(&r, &buf);
    pgdep *d = rv == BERTH_OK ? VEC_ADD(&t->drows) : NULL;
    if (d == NULL) {
        store_buf_fini(&buf);
        return BERTH_ENOMEM;
    }
    memset(d, 0, sizeof *d);
    rv = store_deployment_decode(buf.data, buf.len, &d->decl);
    store_buf_fini(&buf);
    if (rv != BERTH_OK || (d->id = mem_strdup(id)) == NULL) {
        if (rv == BERTH_OK)
            store_deployment_clear(&d->decl);
        t->drows.n--;
        return BERTH_ENOMEM;
    }
    d->number = t->drows.n > 1 ? t->drows.v[t->drows.n - 2].number + 1 : 1;
    d->version = version;
    d->state = ENGINE_DEPLOYMENT_LIVE;
    d->created_at_ms = t->now_ms;
    d->inserted = true;
    *out = d;
    return BERTH_OK;
}

static void deploy_one(pgops_turn *t, pgreq *p)
{
    const char *id = p->req.u.deploy.id;
    const engine_channel *cs = p->req.u.deploy.channels;
    size_t n = p->req.u.deploy.n_channels;
    engine_status *st = &p->reply->status;
    pgdep *prev = latest(t, id);
    if (prev != NULL && prev->state == ENGINE_DEPLOYMENT_LIVE && declares_exactly(prev, cs, n)) {
        p->dep_number = prev->number; /* deployed already: nothing changes */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const pgdep *o = live_other(t, cs[i].name, id);
        if (o != NULL) {
            rules_deploy_conflict(st, i, cs[i].name, o->id, o->version);
            return;
        }
    }
    if (kept(t) >= ENGINE_DEPLOYMENTS_MAX) {
        size_t dropped = 0;
        for (size_t i = 0; i < t->drows.n && dropped < ENGINE_DEPLOYMENTS_MAX / 10; i++)
            if (forgettable(t, i)) {
                t->drows.v[i].forgotten = true;
                dropped++;
            }
    }
    if (kept(t) >= ENGINE_DEPLOYMENTS_MAX) {
        rules_deploy_full(st);
        return;
    }
    uint32_t version = prev ? prev->version + 1 : 1;
    size_t prev_i = prev ? (size_t)(prev - t->drows.v) : 0; /* (VEC_ADD may move it) */
    pgdep *d;
    if (new_row(t, id, version, cs, n, &d) != BERTH_OK) {
        reply_no_memory(st);
        return;
    }
    p->dep_number = d->number;
    if (prev != NULL && t->drows.v[prev_i].state == ENGINE_DEPLOYMENT_LIVE) {
        t->drows.v[prev_i].state = ENGINE_DEPLOYMENT_DRAINING;
        t->drows.v[prev_i].dirty = true;
    }
}

static void retire_one(pgops_turn *t, pgreq *p)
{
    const char *id = p->req.u.retire.id;
    pgdep *d = latest(t, id);
    if (d == NULL) {
        rules_deploy_unknown(&p->reply->status, id);
        return;
    }
    p->dep_number = d->number;
    for (size_t i = t->drows.n; i-- > 0;) {
        pgdep *v = &t->drows.v[i];
        if (v->forgotten || strcmp(v->id, id) != 0 || v->state != ENGINE_DEPLOYMENT_LIVE)
            continue;
        v->state = ENGINE_DEPLOYMENT_DRAINING; /* the gate, last in the turn, may retire it */
        v->dirty = true;
        p->dep_number = v->number;
        break;
    }
}

/* The statements of what the decisions changed. */
static bool writes(pgops_turn *t)
{
    size_t n = t->drows.n, nu = 0, nf = 0;
    int32_t *num = mem_calloc(n ? n : 1, 4), *state = mem_calloc(n ? n : 1, 4);
    int32_t *forgot = mem_calloc(n ? n : 1, 4);
    int64_t *ret = mem_calloc(n ? n : 1, 8);
    bool *ret_null = mem_calloc(n ? n : 1, 1);
    bool ok = num && state && forgot && ret && ret_null, any = false;
    for (size_t i = 0; ok && i < n; i++) {
        const pgdep *d = &t->drows.v[i];
        if (d->forgotten && !d->inserted) {
            forgot[nf++] = (int32_t)d->number;
            any = true;
        } else if (d->inserted) {
            const char *names[ENGINE_DEPLOY_CHANNELS_MAX], *push[ENGINE_DEPLOY_CHANNELS_MAX];
            size_t np = 0;
            for (size_t k = 0; k < d->decl.n_channels; k++) {
                names[k] = d->decl.channels[k].name;
                if (check_transport(tr_of(d->decl.channels[k].transport)) == CHECK_TRANSPORT_PUSH)
                    push[np++] = names[k];
            }
            store_buf buf = {0};
            store_deployment r = d->decl;
            r.id = d->id;
            r.version = d->version;
            int s = store_deployment_encode(&r, &buf) == BERTH_OK
                        ? pgplan_add_stmt(t, "deployment_insert", 256 + buf.len)
                        : -1;
            if (s >= 0) {
                pgwire_params *pp = &t->params[s];
                pgwire_int4(pp, (int32_t)d->number);
                pgwire_text(pp, d->id);
                pgwire_int4(pp, (int32_t)d->version);
                pgwire_int4(pp, d->state);
                pgwire_int8(pp, (int64_t)d->created_at_ms);
                pgwire_null(pp, PGWIRE_INT8);
                pgwire_text_array(pp, names, d->decl.n_channels);
                pgwire_bytea(pp, buf.data, buf.len);
                pgwire_text_array(pp, push, np);
            }
            store_buf_fini(&buf);
            ok = s >= 0;
            any = true;
        } else if (d->dirty) {
            num[nu] = (int32_t)d->number;
            state[nu] = d->state;
            ret[nu] = (int64_t)d->retired_at_ms;
            ret_null[nu] = d->retired_at_ms == 0;
            nu++;
            any = true;
        }
    }
    if (ok && any) {
        int s = pgplan_add_stmt(t, "deployments_write", 64 + 24 * (nu + nf));
        if ((ok = s >= 0)) {
            pgwire_params *pp = &t->params[s];
            pgwire_int4_array(pp, num, NULL, nu);
            pgwire_int4_array(pp, state, NULL, nu);
            pgwire_int8_array(pp, ret, ret_null, nu);
            pgwire_int4_array(pp, forgot, NULL, nf);
            t->deps_changed = true;
        }
    }
    free(num);
    free(state);
    free(forgot);
    free(ret);
    free(ret_null);
    return ok;
}

bool pgdeploy_between(pgops_turn *t, pgturn *pt)
{
    if (t->deploys == 0)
        return true;
    t->now_ms = (uint64_t)pt->now_ms; /* the database's: created_at on it */
    const PGresult *res = pgturn_first_result(pt, (size_t)t->s_dlock);
    int n = res ? PQntuples(res) : 0;
    for (int i = 0; i < n; i++) {
        pgdep *d = VEC_ADD(&t->drows);
        if (d == NULL)
            return false;
        int rv = dep_read(res, i, 0, d);
        if (rv != BERTH_OK) {
            t->drows.n--;
            snprintf(pt->message, sizeof pt->message,
                     rv == BERTH_ENOMEM ? "out of memory reading the deployments"
                                        : "a deployment row berthd cannot read");
            return false;
        }
        bool named = true;
        (void)pgwire_get_bool(res, i, 7, &named);
        d->named = named;
    }
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (p->settled || !is_change(p))
            continue;
        if (p->req.op == ENGINE_OP_DEPLOY)
            deploy_one(t, p);
        else
            retire_one(t, p);
    }
    return writes(t);
}

/* ---- a turn: the gate and the answers ---- */

bool pgdeploy_stmt_last(pgops_turn *t, bool wait)
{
    bool gate =
        wait || t->deploys > 0 ||
        (t->deps != NULL && t->deps->n_draining > 0 &&
         (t->guards.n > 0 || t->housekeeping || t->admin || t->acks > 0 || t->relay_expire));
    if (gate) {
        int s = pgplan_add_stmt(t, "deploy_gate", 8);
        if (s < 0)
            return false;
        pgwire_bool(&t->params[s], wait);
        t->s_gate = s;
    }
    if (t->deploys == 0)
        return true;
    if (!lists(t)) /* the turn's listings show its deploys, as answered in order */
        return false;
    int32_t *nums = mem_calloc(t->deploys, sizeof *nums);
    if (nums == NULL)
        return false;
    size_t n = 0;
    for (pgreq *p = t->list; p != NULL && n < t->deploys; p = p->next)
        if (!p->settled && is_change(p) && p->reply->status.code == ENGINE_CODE_OK &&
            p->dep_number != 0)
            nums[n++] = (int32_t)p->dep_number;
    int s = pgplan_add_stmt(t, "deployments_list", 64 + 4 * n);
    if (s >= 0) {
        pgwire_int4_array(&t->params[s], nums, NULL, n);
        t->s_dlist = s;
    }
    free(nums);
    return s >= 0;
}

static void show(engine_reply *r, const PGresult *res, int row, engine_deployment *out, bool *oom)
{
    pgdep d;
    if (dep_read(res, row, 0, &d) != BERTH_OK) {
        *oom = true;
        return;
    }
    int64_t c[6] = {0};
    for (int k = 0; k < 6; k++)
        (void)pgwire_get_int8(res, row, 7 + k, &c[k]);
    size_t nc = d.decl.n_channels;
    engine_channel *cs = reply_mem(r, (nc ? nc : 1) * sizeof(*cs));
    *out = (engine_deployment){
        .id = reply_strdup(r, d.id),
        .version = d.version,
        .state = (engine_deployment_state)d.state,
        .channels = cs,
        .n_channels = cs ? nc : 0,
        .created_at_ms = d.created_at_ms,
        .retired_at_ms = d.retired_at_ms,
        .pending_deliveries = (uint64_t)c[0],
        .tasks = (uint64_t)c[1],
        .calls_backing_off = (uint64_t)c[2],
        .terminal_tasks = (uint64_t)c[3],
        .poisoned_deliveries = (uint64_t)c[4],
        .calls_retrying = (uint64_t)c[5],
    };
    *oom |= cs == NULL || out->id == NULL;
    for (size_t i = 0; cs != NULL && i < nc; i++) {
        const store_channel *sc = &d.decl.channels[i];
        const char **types =
            sc->n_content_types ? reply_mem(r, sc->n_content_types * sizeof(char *)) : NULL;
        cs[i] = (engine_channel){
            .name = reply_strdup(r, sc->name),
            .transport = reply_strdup(r, tr_of(sc->transport)),
            .reply_max_bytes = sc->reply_max_bytes,
            .content_types = types,
            .n_content_types = types ? sc->n_content_types : 0,
        };
        *oom |= cs[i].name == NULL || cs[i].transport == NULL || (sc->n_content_types && !types);
        for (size_t k = 0; types != NULL && k < sc->n_content_types; k++)
            *oom |= (types[k] = reply_strdup(r, sc->content_types[k])) == NULL;
    }
    dep_fini(&d);
}

void pgdeploy_answer(pgops_turn *t, pgreq *p)
{
    engine_reply *r = p->reply;
    if (p->settled || r->status.code != ENGINE_CODE_OK)
        return;
    const PGresult *res;
    bool oom = false;
    if (p->req.op == ENGINE_OP_LIST_DEPLOYMENTS) {
        res = p->claim >= 0 ? t->stmts[p->claim].result : NULL;
        int n = res ? PQntuples(res) : 0;
        if (n == 0)
            return;
        r->deployments = reply_mem(r, (size_t)n * sizeof(*r->deployments));
        for (int i = 0; r->deployments != NULL && i < n; i++)
            show(r, res, i, &r->deployments[i], &oom);
        if (r->deployments == NULL || oom) {
            reply_reset(r);
            r->deployments = NULL;
            reply_no_memory(&r->status);
            return;
        }
        r->n_deployments = (size_t)n;
        return;
    }
    if (!is_change(p) || t->s_dlist < 0)
        return;
    res = t->stmts[t->s_dlist].result;
    for (int i = 0; res != NULL && i < PQntuples(res); i++) {
        int32_t number;
        if (pgwire_get_int4(res, i, 0, &number) != BERTH_OK || (uint32_t)number != p->dep_number)
            continue;
        r->deployments = reply_mem(r, sizeof(*r->deployments));
        if (r->deployments != NULL) {
            r->n_deployments = 1;
            show(r, res, i, r->deployments, &oom);
        }
        if (r->deployments == NULL || oom) { /* done all the same: the caller can list it */
            r->deployments = NULL;
            r->n_deployments = 0;
        }
        return;
    }
}

bool pgdeploy_committed(pgops_turn *t)
{
    const PGresult *res = t->s_gate >= 0 ? t->stmts[t->s_gate].result : NULL;
    int n = res ? PQntuples(res) : 0;
    for (int i = 0; i < n; i++) {
        t->deps_changed = true;
        if (t->o->on_event == NULL)
            continue;
        int32_t version;
        const char *id;
        size_t len;
        if (pgwire_get_text(res, i, 1, &id, &len) != BERTH_OK ||
            pgwire_get_int4(res, i, 2, &version) != BERTH_OK)
            continue;
        char idz[ENGINE_DEPLOYMENT_ID_MAX + 1];
        snprintf(idz, sizeof idz, "%.*s", (int)len, id);
        engine_event ev = {.kind = ENGINE_EVENT_DEPLOYMENT_RETIRED,
                           .topic = idz,
                           .version = (uint32_t)version,
                           .at_ms = t->now_ms};
        t->o->on_event(t->o->event_ctx, &ev);
    }
    return t->deps_changed;
}

void pgdeploy_turn_free(pgops_turn *t)
{
    rows_free(t);
}
