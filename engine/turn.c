/* turn.c — see turn.h. */
#include "engine/turn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/reply.h"
#include "store/err.h"

void turn_begin(engine *e, uint64_t now_ms)
{
    turn *t = &e->t;
    t->now_ms = now_ms;
    t->answered = t->answered_tail = NULL;
    t->rung = NULL;
    t->parked.n = 0;
    t->fused_waits.n = 0;
    t->failed = false;
    t->fail_code = ENGINE_CODE_OK;
    t->fail_why[0] = '\0';
    t->halt = false;
    memset(&t->count, 0, sizeof(t->count));
    /* (events staged by a failed turn's retry accounting are kept) */
}

void turn_answer(engine *e, pending *p)
{
    p->next = NULL;
    if (e->t.answered_tail)
        e->t.answered_tail->next = p;
    else
        e->t.answered = p;
    e->t.answered_tail = p;
}

/* Stages ev, copying its error's strings. */
static void stage(engine *e, engine_event ev, const engine_error *err)
{
    if (err != NULL) {
        /* Copied: the event is published after later turns ran, which may
         * have freed what the strings belong to (a delivery, a request). */
        ev.error.code = mem_strdup(err->code);
        ev.error.message = mem_strdup(err->message);
        ev.error.details = mem_strdup(err->details);
        if ((err->code && !ev.error.code) || (err->message && !ev.error.message) ||
            (err->details && !ev.error.details)) {
            turn_events_free(&ev, 1);
            return;
        }
    }
    engine_event *slot = VEC_ADD(&e->t.events);
    if (slot == NULL) {
        turn_events_free(&ev, 1);
        return;
    }
    *slot = ev;
}

void turn_event(engine *e, engine_event_kind kind, const topic *t, const uint8_t id[BERTH_ID_LEN],
                const engine_error *err, uint32_t retries_left)
{
    if (e->o.on_event == NULL)
        return;
    engine_event ev = {
        .kind = kind, .topic = t->name, .retries_left = retries_left, .at_ms = e->t.now_ms};
    store_id_format(id, ev.id);
    stage(e, ev, err);
}

void turn_event_named(engine *e, engine_event_kind kind, const char *topic_name,
                      const uint8_t id[BERTH_ID_LEN], const uint8_t *instance_id,
                      const engine_error *err)
{
    if (e->o.on_event == NULL)
        return;
    engine_event ev = {.kind = kind, .topic = topic_name, .at_ms = e->t.now_ms};
    store_id_format(id, ev.id);
    if (instance_id != NULL)
        store_id_format(instance_id, ev.instance_id);
    stage(e, ev, err);
}

void turn_event_deployment(engine *e, const char *id, uint32_t version)
{
    if (e->o.on_event == NULL)
        return;
    engine_event ev = {.kind = ENGINE_EVENT_DEPLOYMENT_RETIRED,
                       .topic = id,
                       .version = version,
                       .at_ms = e->t.now_ms};
    stage(e, ev, NULL);
}

void turn_events_free(engine_event *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)v[i].error.code);
        free((char *)v[i].error.message);
        free((char *)v[i].error.details);
    }
}

void turn_doorbell(engine *e, topic *tp)
{
    if (tp->n_waiters == 0 || tp->rung)
        return;
    tp->rung = true;
    tp->rung_next = e->t.rung;
    e->t.rung = tp;
}

int turn_fail(engine *e, engine_code code, const char *fmt, ...)
{
    turn *t = &e->t;
    if (!t->failed) {
        t->failed = true;
        t->fail_code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->fail_why, sizeof(t->fail_why), fmt, ap);
        va_end(ap);
    }
    return code == ENGINE_CODE_RESOURCE_EXHAUSTED ? BERTH_ENOMEM : BERTH_EIO;
}

void turn_fail_status(const engine *e, engine_status *st)
{
    const turn *t = &e->t;
    engine_code code = t->fail_code != ENGINE_CODE_OK ? t->fail_code : ENGINE_CODE_UNAVAILABLE;
    reply_status(st, code, "%s; nothing of this request was kept: try again", t->fail_why);
    st->retryable = code != ENGINE_CODE_INTERNAL;
    st->engine_code = st->retryable ? ENGINE_EC_ENGINE_UNAVAILABLE : ENGINE_EC_INTERNAL;
}

void turn_halt(engine *e, const char *why)
{
    if (!e->halted) {
        fprintf(stderr, "berth: engine halted: %s\n", why);
        snprintf(e->halt_why, sizeof(e->halt_why), "%s", why);
        e->counters.halts++;
        e->reopen_backoff_ms = ENGINE_REOPEN_BACKOFF_MIN_MS;
        e->reopen_at_ms = e->t.now_ms + e->reopen_backoff_ms;
    }
    e->halted = true;
    e->t.halt = true;
}

void turn_call_done(pending *list)
{
    while (list != NULL) {
        pending *next = list->next;
        list->done(list->arg, list->reply);
        free(list);
        list = next;
    }
}

void turn_refuse(pending *list, const engine_status *st, bool keep_unavailable)
{
    for (pending *p = list; p != NULL; p = p->next) {
        if (keep_unavailable && p->reply->status.code == ENGINE_CODE_UNAVAILABLE)
            continue;
        reply_reset(p->reply);
        p->reply->status = *st;
    }
}
