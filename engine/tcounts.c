/*
 * tcounts.c — see tcounts.h.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/mem.h"
#include "engine/reply.h"
#include "engine/tcounts.h"
#include "store/err.h"

int tcounts_init(tcounts *tc, size_t max)
{
    tc->other = NULL;
    tc->max = max;
    return table_init(&tc->by_name);
}

void tcounts_fini(tcounts *tc)
{
    size_t i = 0;
    tcounter *c;
    while ((c = table_next(&tc->by_name, &i)) != NULL) {
        free(c->name);
        free(c);
    }
    table_fini(&tc->by_name);
    tc->other = NULL;
}

static tcounter *tcounter_new(tcounts *tc, const char *name, size_t len)
{
    tcounter *c = mem_calloc(1, sizeof(*c));
    if (c == NULL || (c->name = mem_alloc(len + 1)) == NULL) {
        free(c);
        return NULL;
    }
    memcpy(c->name, name, len);
    c->name[len] = '\0';
    c->len = len;
    c->c.topic = c->name;
    if (table_put(&tc->by_name, c->name, len, c) != BERTH_OK) {
        free(c->name);
        free(c);
        return NULL;
    }
    return c;
}

engine_topic_counters *tcounts_get(tcounts *tc, const char *name, size_t len)
{
    tcounter *c = table_get(&tc->by_name, name, len);
    if (c == NULL && tc->by_name.n < tc->max)
        c = tcounter_new(tc, name, len);
    else if (c == NULL)
        c = tc->other != NULL ? tc->other : (tc->other = tcounter_new(tc, "_other", 6));
    return c != NULL ? &c->c : NULL;
}

int tcounts_read(const tcounts *tc, engine_reply *r)
{
    engine_metrics *m = &r->metrics;
    m->topics = NULL;
    m->n_topics = 0;
    size_t n = tc->by_name.n;
    if (n == 0)
        return BERTH_OK;
    if ((m->topics = reply_mem(r, n * sizeof(*m->topics))) == NULL)
        return BERTH_ENOMEM;
    size_t i = 0;
    const tcounter *c;
    while ((c = table_next(&tc->by_name, &i)) != NULL) {
        engine_topic_counters *out = &m->topics[m->n_topics++];
        *out = c->c;
        if ((out->topic = reply_strdup(r, c->name)) == NULL) {
            m->n_topics = 0;
            return BERTH_ENOMEM;
        }
    }
    return BERTH_OK;
}
