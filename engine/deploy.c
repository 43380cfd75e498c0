/* deploy.c — see deploy.h. */
#include "engine/deploy.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/check.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "engine/state.h"
#include "engine/turn.h"
#include "store/err.h"

#define PULL "pull"

/* ---- memory ---- */

static void channel_fini(channel *c)
{
    free(c->name);
    free(c->transport);
    free(c->lane);
    for (size_t i = 0; i < c->n_content_types; i++)
        free(c->content_types[i]);
    free(c->content_types);
}

static void dep_free(deployment *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->n_chans; i++)
        channel_fini(&d->chans[i]);
    free(d->chans);
    free(d->id);
    free(d);
}

/* A deployment with copies of the declarations (transport NULL or "" is
 * pull). NULL: no memory. */
static deployment *dep_new(const char *id, const engine_channel *cs, size_t n)
{
    deployment *d = mem_calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    if ((d->id = mem_strdup(id)) == NULL ||
        (d->chans = mem_calloc(n ? n : 1, sizeof(channel))) == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++, d->n_chans++) {
        channel *c = &d->chans[i];
        const char *tr = cs[i].transport && cs[i].transport[0] ? cs[i].transport : PULL;
        c->dep = d;
        c->reply_max_bytes = cs[i].reply_max_bytes;
        if ((c->name = mem_strdup(cs[i].name)) == NULL || (c->transport = mem_strdup(tr)) == NULL ||
            (check_transport(tr) == CHECK_TRANSPORT_PUSH &&
             (c->lane = mem_calloc(1, sizeof(*c->lane))) == NULL) ||
            (cs[i].n_content_types > 0 &&
             (c->content_types = mem_calloc(cs[i].n_content_types, sizeof(char *))) == NULL)) {
            d->n_chans++;
            goto fail;
        }
        for (size_t k = 0; k < cs[i].n_content_types; k++, c->n_content_types++)
            if ((c->content_types[k] = mem_strdup(cs[i].content_types[k])) == NULL) {
                d->n_chans++;
                goto fail;
            }
    }
    return d;
fail:
    dep_free(d);
    return NULL;
}

/* A call with an attempt left may still re-drive into d (even when its
 * attempt's delivery is poisoned or its task terminal): it holds d. Its
 * BACKOFF calls are among them. */
static uint64_t held(const deployment *d)
{
    return (d->n_deliveries - d->n_poisoned) + (d->n_tasks - d->n_terminal) + d->n_retrying;
}

static void list_draining(engine *e, deployment *d)
{
    if (d->draining_listed)
        return;
    d->draining_listed = true;
    d->draining_next = e->draining;
    e->draining = d;
}

static void routes_clear(engine *e)
{
    size_t i = 0;
    route *r;
    while ((r = table_next(&e->routes, &i)) != NULL)
        free(r);
    table_clear(&e->routes);
}

/* The routes again, from every deployment that is not retired. */
static int routes_build(engine *e)
{
    routes_clear(e);
    for (size_t i = 0; i < e->deps.n; i++) {
        deployment *d = e->deps.v[i];
        if (d->state == ENGINE_DEPLOYMENT_RETIRED)
            continue;
        for (size_t k = 0; k < d->n_chans; k++) {
            const channel *c = &d->chans[k];
            size_t len = strlen(c->name);
            route *r = table_get(&e->routes, c->name, len);
            if (r == NULL) {
                if ((r = mem_calloc(1, sizeof(*r))) == NULL)
                    return BERTH_ENOMEM;
                r->name = c->name;
                if (table_put(&e->routes, r->name, len, r) != BERTH_OK) {
                    free(r);
                    return BERTH_ENOMEM;
                }
            }
            if (d->state == ENGINE_DEPLOYMENT_LIVE)
                r->live = c;
            else
                r->n_draining++;
        }
    }
    return BERTH_OK;
}

/* ---- the store ---- */

static int dep_put(engine *e, const deployment *d)
{
    store_channel cs[ENGINE_DEPLOY_CHANNELS_MAX];
    for (size_t i = 0; i < d->n_chans; i++)
        cs[i] = (store_channel){
            .name = d->chans[i].name,
            .transport = d->chans[i].transport,
            .reply_max_bytes = d->chans[i].reply_max_bytes,
            .content_types = (const char *const *)d->chans[i].content_types,
            .n_content_types = d->chans[i].n_content_types,
        };
    store_deployment r = {
        .id = d->id,
        .version = d->version,
        .state = (int)d->state,
        .channels = cs,
        .n_channels = d->n_chans,
        .created_at_ms = d->created_at_ms,
        .retired_at_ms = d->retired_at_ms,
    };
    if (store_deployment_encode(&r, &e->buf) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory writing a deployment");
    uint8_t key[STORE_DEPLOYMENT_KEY_LEN];
    store_put_be32(key, d->number);
    store_batch_put(e->batch, STORE_CF_DEPLOYMENTS, key, sizeof(key), e->buf.data, e->buf.len);
    return BERTH_OK;
}

static int load_one(engine *e, uint32_t number, const void *v, size_t vl)
{
    store_deployment r;
    int rv = store_deployment_decode(v, vl, &r);
    if (rv != BERTH_OK)
        return rv;
    engine_channel cs[ENGINE_DEPLOY_CHANNELS_MAX];
    if (r.n_channels > ENGINE_DEPLOY_CHANNELS_MAX) {
        store_deployment_clear(&r);
        return BERTH_ECORRUPT;
    }
    for (size_t i = 0; i < r.n_channels; i++)
        cs[i] = (engine_channel){
            .name = r.channels[i].name,
            .transport = r.channels[i].transport,
            .reply_max_bytes = r.channels[i].reply_max_bytes,
            .content_types = r.channels[i].content_types,
            .n_content_types = r.channels[i].n_content_types,
        };
    deployment *d = dep_new(r.id, cs, r.n_channels);
    deployment **slot = d ? VEC_ADD(&e->deps) : NULL;
    if (slot == NULL) {
        dep_free(d);
        store_deployment_clear(&r);
        return BERTH_ENOMEM;
    }
    *slot = d;
    d->number = number;
    d->version = r.version;
    d->state = (engine_deployment_state)r.state;
    d->created_at_ms = r.created_at_ms;
    d->retired_at_ms = r.retired_at_ms;
    if (d->state == ENGINE_DEPLOYMENT_DRAINING)
        list_draining(e, d);
    store_deployment_clear(&r);
    return BERTH_OK;
}

int deploy_load(engine *e, char *err, size_t errlen)
{
    store_iter *it;
    int rv = store_iter_open(e->store, STORE_CF_DEPLOYMENTS, &it);
    if (rv != BERTH_OK)
        return rv;
    for (; rv == BERTH_OK && store_iter_valid(it); store_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = store_iter_key(it, &kl);
        const void *v = store_iter_value(it, &vl);
        rv =
            kl == STORE_DEPLOYMENT_KEY_LEN ? load_one(e, store_get_be32(k), v, vl) : BERTH_ECORRUPT;
        if (rv == BERTH_ECORRUPT && err != NULL)
            snprintf(err, errlen, "a deployment row is corrupt");
    }
    if (rv == BERTH_OK && store_iter_status(it) != BERTH_OK) {
        if (err != NULL)
            snprintf(err, errlen, "reading deployments: %s", store_last_error(e->store));
        rv = BERTH_EIO;
    }
    store_iter_close(it);
    if (rv == BERTH_OK && (rv = routes_build(e)) != BERTH_OK && err != NULL)
        snprintf(err, errlen, "out of memory");
    return rv;
}

void deploy_clear(engine *e)
{
    routes_clear(e);
    for (size_t i = 0; i < e->deps.n; i++)
        dep_free(e->deps.v[i]);
    e->deps.n = 0;
    e->draining = NULL;
    deployment *im = &e->implicit;
    im->n_deliveries = im->n_poisoned = im->n_tasks = im->n_terminal = im->n_backoff = 0;
    im->n_retrying = 0;
    im->n_instances = 0;
}

/* ---- routing ---- */

const channel *deploy_route(engine *e, const char *name, engine_status *st)
{
    const route *r = table_get(&e->routes, name, strlen(name));
    if (r != NULL && r->live != NULL)
        return r->live;
    if (r != NULL && r->n_draining > 0)
        rules_route_draining(st, name);
    else if (e->o.strict_channels)
        rules_route_undeclared(st, name);
    return NULL;
}

bool deploy_declared(engine *e, const char *name)
{
    return table_get(&e->routes, name, strlen(name)) != NULL;
}

static const channel *find_channel(const deployment *d, const char *name)
{
    for (size_t i = 0; i < d->n_chans; i++)
        if (strcmp(d->chans[i].name, name) == 0)
            return &d->chans[i];
    return NULL;
}

static deployment *by_number(engine *e, uint32_t number)
{
    /* Numbers increase along e->deps: a binary search. */
    size_t lo = 0, hi = e->deps.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t n = e->deps.v[mid]->number;
        if (n == number)
            return e->deps.v[mid];
        if (n < number)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const channel *deploy_channel_of(engine *e, uint32_t number, const char *name)
{
    const deployment *d = number ? by_number(e, number) : NULL;
    return d ? find_channel(d, name) : NULL;
}

/* ---- the gate ---- */

int deploy_redrain(engine *e, deployment *d)
{
    if (d->state != ENGINE_DEPLOYMENT_RETIRED)
        return BERTH_OK;
    d->state = ENGINE_DEPLOYMENT_DRAINING;
    d->retired_at_ms = 0;
    list_draining(e, d);
    int rv = dep_put(e, d);
    if (rv == BERTH_OK && routes_build(e) != BERTH_OK)
        rv = turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory routing channels");
    return rv;
}

int deploy_gate(engine *e)
{
    bool changed = false;
    deployment **link = &e->draining;
    while (*link != NULL) {
        deployment *d = *link;
        if (d->state == ENGINE_DEPLOYMENT_DRAINING && held(d) > 0) {
            link = &d->draining_next;
            continue;
        }
        *link = d->draining_next;
        d->draining_listed = false;
        if (d->state != ENGINE_DEPLOYMENT_DRAINING)
            continue;
        d->state = ENGINE_DEPLOYMENT_RETIRED;
        d->retired_at_ms = e->t.now_ms;
        changed = true;
        int rv = dep_put(e, d);
        if (rv != BERTH_OK)
            return rv;
        turn_event_deployment(e, d->id, d->version);
    }
    if (changed && routes_build(e) != BERTH_OK)
        return turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory routing channels");
    return BERTH_OK;
}

/* ---- requests ---- */

static void show(engine_reply *r, engine_deployment *out, const deployment *d, bool *oom)
{
    engine_channel *cs = reply_mem(r, (d->n_chans ? d->n_chans : 1) * sizeof(*cs));
    *out = (engine_deployment){
        .id = reply_strdup(r, d->id),
        .version = d->version,
        .state = d->state,
        .channels = cs,
        .n_channels = cs ? d->n_chans : 0,
        .created_at_ms = d->created_at_ms,
        .retired_at_ms = d->retired_at_ms,
        .pending_deliveries = d->n_deliveries - d->n_poisoned,
        .tasks = d->n_tasks - d->n_terminal,
        .calls_backing_off = d->n_backoff,
        .terminal_tasks = d->n_terminal,
        .poisoned_deliveries = d->n_poisoned,
        .calls_retrying = d->n_retrying,
    };
    *oom |= cs == NULL || out->id == NULL;
    for (size_t i = 0; cs != NULL && i < d->n_chans; i++) {
        const channel *c = &d->chans[i];
        const char **types =
            c->n_content_types ? reply_mem(r, c->n_content_types * sizeof(char *)) : NULL;
        cs[i] = (engine_channel){
            .name = reply_strdup(r, c->name),
            .transport = reply_strdup(r, c->transport),
            .reply_max_bytes = c->reply_max_bytes,
            .content_types = types,
            .n_content_types = types ? c->n_content_types : 0,
        };
        *oom |= cs[i].name == NULL || cs[i].transport == NULL || (c->n_content_types && !types);
        for (size_t k = 0; types != NULL && k < c->n_content_types; k++)
            *oom |= (types[k] = reply_strdup(r, c->content_types[k])) == NULL;
    }
}

/* Answers p with d alone (DEPLOY, RETIRE). */
static void answer_one(pending *p, const deployment *d)
{
    engine_reply *r = p->reply;
    bool oom = false;
    r->deployments = reply_mem(r, sizeof(*r->deployments));
    if (r->deployments != NULL) {
        r->n_deployments = 1;
        show(r, r->deployments, d, &oom);
    }
    if (r->deployments == NULL || oom) {
        /* What changed is written all the same: the caller can list it. */
        r->deployments = NULL;
        r->n_deployments = 0;
    }
}

/* The newest version of id, or NULL. */
static deployment *latest(engine *e, const char *id)
{
    for (size_t i = e->deps.n; i-- > 0;)
        if (strcmp(e->deps.v[i]->id, id) == 0)
            return e->deps.v[i];
    return NULL;
}

static bool same_strings(char *const *a, size_t na, const char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

/* A retired version that nothing points at any more, and that a newer
 * version of its id stands for in the listing. */
static bool forgettable(engine *e, size_t i)
{
    const deployment *d = e->deps.v[i];
    if (d->state != ENGINE_DEPLOYMENT_RETIRED || d->n_deliveries || d->n_tasks || d->n_instances)
        return false;
    for (size_t k = i + 1; k < e->deps.n; k++)
        if (strcmp(e->deps.v[k]->id, d->id) == 0)
            return true;
    return false;
}

/* At the cap: the versions forgettable, oldest first, up to a tenth of
 * the cap, leave memory and the store, so that a deploy after many others
 * never fails for the history alone. */
static void forget_some(engine *e)
{
    size_t kept = 0, dropped = 0;
    for (size_t i = 0; i < e->deps.n; i++) {
        deployment *d = e->deps.v[i];
        if (dropped < ENGINE_DEPLOYMENTS_MAX / 10 && forgettable(e, i)) {
            uint8_t key[STORE_DEPLOYMENT_KEY_LEN];
            store_put_be32(key, d->number);
            store_batch_delete(e->batch, STORE_CF_DEPLOYMENTS, key, sizeof(key));
            dep_free(d);
            dropped++;
            continue;
        }
        e->deps.v[kept++] = d; /* (in order: numbers stay increasing) */
    }
    e->deps.n = kept;
}

/* d declares exactly cs (in order, pull spelt either way). */
static bool declares_exactly(const deployment *d, const engine_channel *cs, size_t n)
{
    if (d->n_chans != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        const channel *c = &d->chans[i];
        const char *tr = cs[i].transport && cs[i].transport[0] ? cs[i].transport : PULL;
        if (strcmp(c->name, cs[i].name) != 0 || strcmp(c->transport, tr) != 0 ||
            c->reply_max_bytes != cs[i].reply_max_bytes ||
            !same_strings(c->content_types, c->n_content_types, cs[i].content_types,
                          cs[i].n_content_types))
            return false;
    }
    return true;
}

/* The deploy of id with cs, answered in p (or st on refusal). */
static int deploy_make(engine *e, const char *id, const engine_channel *cs, size_t n,
                       deployment **made, engine_status *st)
{
    *made = NULL;
    if (!rules_deploy_check(&e->o, id, cs, n, st))
        return BERTH_OK;
    deployment *prev = latest(e, id);
    if (prev != NULL && prev->state == ENGINE_DEPLOYMENT_LIVE && declares_exactly(prev, cs, n)) {
        *made = prev; /* deployed already: nothing changes */
        return BERTH_OK;
    }
    for (size_t i = 0; i < n; i++) {
        const route *r = table_get(&e->routes, cs[i].name, strlen(cs[i].name));
        if (r != NULL && r->live != NULL && strcmp(r->live->dep->id, id) != 0) {
            rules_deploy_conflict(st, i, cs[i].name, r->live->dep->id, r->live->dep->version);
            return BERTH_OK;
        }
    }
    if (e->deps.n >= ENGINE_DEPLOYMENTS_MAX)
        forget_some(e);
    if (e->deps.n >= ENGINE_DEPLOYMENTS_MAX) {
        rules_deploy_full(st);
        return BERTH_OK;
    }
    deployment *d = dep_new(id, cs, n);
    deployment **slot = d ? VEC_ADD(&e->deps) : NULL;
    if (slot == NULL) {
        dep_free(d);
        reply_no_memory(st);
        return BERTH_OK;
    }
    *slot = d;
    d->number = e->deps.n > 1 ? e->deps.v[e->deps.n - 2]->number + 1 : 1;
    d->version = prev ? prev->version + 1 : 1;
    d->state = ENGINE_DEPLOYMENT_LIVE;
    d->created_at_ms = e->t.now_ms;
    /* From here it is written: a failure fails the turn. */
    int rv = dep_put(e, d);
    if (rv == BERTH_OK && prev != NULL && prev->state == ENGINE_DEPLOYMENT_LIVE) {
        prev->state = ENGINE_DEPLOYMENT_DRAINING;
        list_draining(e, prev);
        rv = dep_put(e, prev);
    }
    if (rv == BERTH_OK && routes_build(e) != BERTH_OK)
        rv = turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory routing channels");
    *made = d;
    return rv;
}

int deploy_apply(engine *e, pending *p)
{
    deployment *d;
    int rv = deploy_make(e, p->req.u.deploy.id, p->req.u.deploy.channels,
                         p->req.u.deploy.n_channels, &d, &p->reply->status);
    if (rv == BERTH_OK && d != NULL)
        answer_one(p, d);
    return rv;
}

int deploy_retire(engine *e, pending *p)
{
    engine_status *st = &p->reply->status;
    const char *id = p->req.u.retire.id;
    if (!check_topic(id, "id", st))
        return BERTH_OK;
    deployment *d = latest(e, id);
    if (d == NULL) {
        rules_deploy_unknown(st, id);
        return BERTH_OK;
    }
    for (size_t i = e->deps.n; i-- > 0;) {
        deployment *v = e->deps.v[i];
        if (strcmp(v->id, id) != 0 || v->state != ENGINE_DEPLOYMENT_LIVE)
            continue;
        v->state = ENGINE_DEPLOYMENT_DRAINING;
        list_draining(e, v);
        int rv = dep_put(e, v);
        if (rv == BERTH_OK && routes_build(e) != BERTH_OK)
            rv = turn_fail(e, ENGINE_CODE_RESOURCE_EXHAUSTED, "out of memory routing channels");
        if (rv != BERTH_OK)
            return rv;
        /* Holding nothing, it retires at the end of this turn. */
        rv = deploy_gate(e);
        if (rv != BERTH_OK)
            return rv;
        d = v;
        break;
    }
    answer_one(p, d);
    return BERTH_OK;
}

int deploy_list(engine *e, pending *p)
{
    engine_reply *r = p->reply;
    if (e->deps.n == 0)
        return BERTH_OK;
    bool oom = false;
    r->deployments = reply_mem(r, e->deps.n * sizeof(*r->deployments));
    for (size_t i = 0; r->deployments != NULL && i < e->deps.n; i++)
        show(r, &r->deployments[i], e->deps.v[i], &oom);
    if (r->deployments == NULL || oom) {
        reply_reset(r);
        r->deployments = NULL;
        reply_no_memory(&r->status);
        return BERTH_OK;
    }
    r->n_deployments = e->deps.n;
    return BERTH_OK;
}

/* ---- at open ---- */

int deploy_boot(engine *e, const engine_options *o, char *err, size_t errlen)
{
    if (o->n_channels == 0)
        return BERTH_OK;
    err[0] = '\0';
    engine_status st = {0};
    deployment *d;
    turn_begin(e, e->clock.now_ms(e->clock.ctx));
    int rv = deploy_make(e, ENGINE_BOOT_DEPLOYMENT, o->channels, o->n_channels, &d, &st);
    if (rv == BERTH_OK && st.code != ENGINE_CODE_OK) {
        snprintf(err, errlen, "channel: %s", st.message);
        store_batch_clear(e->batch);
        return BERTH_EINVAL;
    }
    if (rv == BERTH_OK && store_batch_count(e->batch) > 0 &&
        (store_append(e->store, e->batch) != BERTH_OK ||
         store_sync(e->store, err, errlen) != BERTH_OK))
        rv = BERTH_EIO;
    if (rv != BERTH_OK && err[0] == '\0')
        snprintf(err, errlen, "cannot deploy the channels given: %s",
                 turn_failed(e) ? e->t.fail_why : store_last_error(e->store));
    store_batch_clear(e->batch);
    turn_events_free(e->t.events.v, e->t.events.n);
    e->t.events.n = 0;
    return rv;
}

/* ---- invariants ---- */

void deploy_check(engine *e)
{
#ifdef BERTH_CHECKS
    for (size_t i = 0; i <= e->deps.n; i++) {
        deployment *d = i < e->deps.n ? e->deps.v[i] : &e->implicit;
        uint64_t nd = 0, np = 0, nt = 0, nterm = 0, nb = 0, nr = 0;
        size_t k = 0;
        const delivery *dv;
        while ((dv = idtab_next(&e->deliveries, &k)) != NULL)
            if (state_dep(e, dv->chan) == d) {
                nd++;
                np += dv->poisoned;
            }
        k = 0;
        const task *t;
        while ((t = idtab_next(&e->tasks, &k)) != NULL)
            if (state_dep(e, t->chan) == d) {
                nt++;
                nterm += t->terminal;
            }
        k = 0;
        const instance *in;
        while ((in = table_next(&e->instances, &k)) != NULL)
            if (state_dep(e, in->chan) == d && !in->ended) {
                nb += in->state == ENGINE_INSTANCE_BACKOFF;
                nr += in->attempt < in->max_attempts;
                assert(in->state != ENGINE_INSTANCE_BACKOFF || in->attempt < in->max_attempts);
            }
        assert(d->n_deliveries == nd && d->n_poisoned == np);
        assert(d->n_tasks == nt && d->n_terminal == nterm);
        assert(d->n_backoff == nb && d->n_retrying == nr);
        k = 0;
        uint64_t ni = 0;
        while ((in = table_next(&e->instances, &k)) != NULL)
            ni += state_dep(e, in->chan) == d;
        assert(d->n_instances == ni);
        for (size_t c = 0; c < d->n_chans; c++) {
            const push_lane *l = d->chans[c].lane;
            if (l == NULL)
                continue;
            uint64_t flying = 0, waiting = 0, listed = 0;
            k = 0;
            while ((dv = idtab_next(&e->deliveries, &k)) != NULL)
                if (dv->chan == &d->chans[c]) {
                    flying += dv->inflight;
                    waiting += dv->waiting;
                }
            for (const delivery *w = l->head; w != NULL; w = w->wait_next)
                listed++;
            assert(l->inflight == flying && waiting == listed);
        }
        assert(d->state != ENGINE_DEPLOYMENT_RETIRED || held(d) == 0);
        assert(d->state != ENGINE_DEPLOYMENT_DRAINING || d->draining_listed);
        if (i > 0 && i < e->deps.n)
            assert(e->deps.v[i - 1]->number < d->number);
    }
#else
    (void)e;
#endif
}
