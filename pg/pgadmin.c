/* pgadmin.c — see pgadmin.h. */
#include "pg/pgadmin.h"

#include <stdio.h>
#include <string.h>

#include "engine/check.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "pg/pgwire.h"
#include "store/err.h"
#include "store/keys.h"

void pgadmin_plan(pgops_turn *t, pgreq *p)
{
    engine_status *st = &p->reply->status;
    bool retry = p->req.op == ENGINE_OP_RETRY_TERMINAL;
    const char *id_str = retry ? p->req.u.retry_terminal.id : p->req.u.discard_terminal.id;
    uint64_t retries = 0;
    uint8_t id[BERTH_ID_LEN];
    if ((retry && !check_bound(p->req.u.retry_terminal.has_retries, p->req.u.retry_terminal.retries,
                               t->o->retries, t->o->retries_max, false, "retries", &retries, st)) ||
        !rules_task_id(id_str, "id", id, st)) {
        p->settled = true;
        return;
    }
    p->retries = (uint32_t)retries;
    t->share |= retry; /* its deployment may drain again: the gate waits for the turn */
    p->claim = pgplan_add_stmt(t, retry ? "tasks_retry" : "tasks_discard",
                               64 + sizeof RULES_DISCARDED_MESSAGE);
    if (p->claim < 0) {
        reply_no_memory(st);
        p->settled = true;
        return;
    }
    pgwire_params *pp = &t->params[p->claim];
    pgwire_uuid(pp, id);
    if (retry)
        pgwire_int4(pp, (int32_t)retries);
    else
        pgwire_text(pp, RULES_DISCARDED_MESSAGE);
    t->admin = true;
}

bool pgadmin_in(const pgops_turn *t)
{
    return t->admin;
}

static bool is_admin(const pgreq *p)
{
    return !p->settled && p->claim >= 0 &&
           (p->req.op == ENGINE_OP_RETRY_TERMINAL || p->req.op == ENGINE_OP_DISCARD_TERMINAL);
}

void pgadmin_between(pgops_turn *t, pgturn *pt)
{
    for (pgreq *p = t->list; p != NULL; p = p->next) {
        if (!is_admin(p))
            continue;
        const PGresult *res = pgturn_first_result(pt, (size_t)p->claim);
        if (res == NULL || PQntuples(res) != 1 || pgwire_isnull(res, 0, 0))
            continue; /* nothing changed */
        if (p->req.op == ENGINE_OP_RETRY_TERMINAL) {
            pgplan_notify_add(t, 'p', PQgetvalue(res, 0, 0), 0);
        } else if (!pgwire_isnull(res, 0, 2)) {
            uint8_t iid[BERTH_ID_LEN];
            char hex[ENGINE_ID_STR];
            if (pgwire_get_uuid(res, 0, 2, iid) != BERTH_OK)
                continue;
            store_id_format(iid, hex);
            pgplan_notify_add(t, 'r', hex, 0); /* its awaits, on any replica */
            pgplan_notify_add(t, 'i', "", t->o->instance_retention_ms);
        }
    }
}

void pgadmin_answer(pgops_turn *t, pgreq *p)
{
    if (!is_admin(p))
        return;
    engine_reply *r = p->reply;
    bool retry = p->req.op == ENGINE_OP_RETRY_TERMINAL;
    const char *id_str = retry ? p->req.u.retry_terminal.id : p->req.u.discard_terminal.id;
    const PGresult *res = t->stmts[p->claim].result;
    int32_t was = 0;
    if (res == NULL || PQntuples(res) != 1) {
        reply_unavailable(&r->status, "reading the task failed");
        return;
    }
    if (pgwire_isnull(res, 0, 1)) {
        rules_not_found(&r->status, id_str);
        return;
    }
    (void)pgwire_get_int4(res, 0, 1, &was);
    if (was == 0 || pgwire_isnull(res, 0, 0)) {
        rules_not_terminal(&r->status, id_str,
                           retry ? "a terminal task can be retried"
                                 : "a terminal task can be discarded");
        return;
    }
    uint8_t id[BERTH_ID_LEN];
    (void)store_id_parse(id_str, id);
    const char *topic = PQgetvalue(res, 0, 0);
    if (retry && !pgwire_isnull(res, 0, 2))
        t->deps_changed = true; /* its deployment drains again */
    pgplan_event(t, retry ? ENGINE_EVENT_TASK_RETRIED : ENGINE_EVENT_TASK_DISCARDED, topic, id,
                 NULL, retry ? p->retries : 0);
    if (retry || pgwire_isnull(res, 0, 2))
        return;
    uint8_t iid[BERTH_ID_LEN];
    if (pgwire_get_uuid(res, 0, 2, iid) != BERTH_OK)
        return;
    engine_error err = {.code = ENGINE_EC_DISCARDED, .message = RULES_DISCARDED_MESSAGE};
    pgplan_event(t, ENGINE_EVENT_INSTANCE_RESOLVED, PQgetvalue(res, 0, 3), iid, &err, 0);
    t->delta.calls_failed++;
}
