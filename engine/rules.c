/*
 * rules.c — the engine's decisions, apart from its memory (rules.h).
 *
 * Each function here is what a handler decided inline before: the same
 * checks in the same order, the same wording, the same codes. The handlers
 * (submit.c, claim.c, guard.c, intake.c, instance.c, calls.c, wait.c,
 * deploy.c) build a view of the state they hold and ask here, so another
 * store can ask the same questions of its own state and answer alike.
 *
 * Any thread (pure functions; the backoffs draw their jitter from
 * check.c's generator).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "engine/check.h"
#include "engine/reply.h"
#include "engine/rules.h"
#include "store/err.h"

bool rules_task_id(const char *id_str, const char *field, uint8_t id[BERTH_ID_LEN],
                   engine_status *st)
{
    if (store_id_parse(id_str, id) == BERTH_OK)
        return true;
    reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "%s: not a task id (32 hex digits)", field);
    snprintf(st->field, sizeof(st->field), "%s", field);
    return false;
}

void rules_not_found(engine_status *st, const char *id_str)
{
    reply_status(st, ENGINE_CODE_NOT_FOUND, "no task %s", id_str);
    st->verdict = ENGINE_VERDICT_NOT_FOUND;
}

/* ---- The operator's pages and terminal tasks ----------------------------- */

void rules_list_after_unknown(engine_status *st)
{
    reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                 "after_id: neither a page's next_after_id nor a task that is there");
    snprintf(st->field, sizeof(st->field), "after_id");
}

bool rules_list_check(const engine_options *o, const char *topic, engine_task_state state,
                      uint32_t limit, const char *after, rules_list *out, engine_status *st)
{
    *out = (rules_list){0};
    if (!check_bound(limit != 0, limit, o->batch_default, o->batch_max, false, "limit", &out->limit,
                     st) ||
        (topic != NULL && !check_topic(topic, "topic", st)))
        return false;
    if ((int)state < 0 || state > ENGINE_TASK_DELAYED) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "state: %d is not a task state", (int)state);
        snprintf(st->field, sizeof(st->field), "state");
        return false;
    }
    if (after == NULL || after[0] == '\0')
        return true;
    if (after[0] == 's' && strlen(after) == 17) {
        out->seq = 0;
        for (const char *c = after + 1; *c != '\0'; c++) {
            int v = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
            if (v < 0) {
                rules_list_after_unknown(st);
                return false;
            }
            out->seq = out->seq << 4 | (uint64_t)v;
        }
        out->after = RULES_AFTER_SEQ;
        return true;
    }
    if (store_id_parse(after, out->id) != BERTH_OK) {
        rules_list_after_unknown(st);
        return false;
    }
    out->after = RULES_AFTER_ID;
    return true;
}

void rules_list_token(uint64_t seq, char out[24])
{
    snprintf(out, 24, "s%016" PRIx64, seq);
}

void rules_not_terminal(engine_status *st, const char *id_str, const char *verb)
{
    reply_status(st, ENGINE_CODE_FAILED_PRECONDITION, "task %s is not terminal: only %s", id_str,
                 verb);
}

/* ---- The guard (R8) ----------------------------------------------------- */

bool rules_guard_parse(const engine_guard *g, uint8_t id[BERTH_ID_LEN], uint8_t token[BERTH_ID_LEN],
                       engine_status *st)
{
    if (!check_text(g->worker_id, ENGINE_WORKER_ID_MAX, true, "worker_id", st))
        return false;
    if (store_id_parse(g->lock_token, token) != BERTH_OK) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "lock_token: not a lock token");
        snprintf(st->field, sizeof(st->field), "lock_token");
        return false;
    }
    return rules_task_id(g->task_id, "task_id", id, st);
}

bool rules_guard(const rules_lock *lk, const engine_guard *g, const uint8_t token[BERTH_ID_LEN],
                 uint64_t now_ms, engine_status *st)
{
    if (!lk->found) {
        rules_not_found(st, g->task_id);
        return false;
    }
    bool live = rules_lock_live(lk, now_ms);
    if (!lk->terminal && live && sodium_memcmp(token, lk->lock_token, BERTH_ID_LEN) == 0 &&
        strcmp(g->worker_id, lk->worker_id) == 0)
        return true;
    /* The second look: lock state only. */
    if (lk->terminal) {
        reply_status(st, ENGINE_CODE_FAILED_PRECONDITION,
                     "task %s is terminal: its failure budget is spent", g->task_id);
        st->verdict = ENGINE_VERDICT_TERMINAL;
    } else if (live) {
        reply_status(st, ENGINE_CODE_ABORTED, "task %s is held by another claim", g->task_id);
        st->verdict = ENGINE_VERDICT_LOCK_HELD;
    } else {
        reply_status(st, ENGINE_CODE_ABORTED,
                     "task %s: the lock expired or was released; the task is fetchable again",
                     g->task_id);
        st->verdict = ENGINE_VERDICT_LOCK_LOST;
    }
    return false;
}

/* ---- fail, extend_lock (R6, R11) ---------------------------------------- */

bool rules_fail_check(const engine_options *o, const engine_fail_args *a, rules_fail_in *in,
                      engine_status *st)
{
    uint64_t retry_in = 0, retries_left = 0;
    if (!check_bound(a->has_retry_in_ms, a->retry_in_ms, 0, o->retry_max_ms, true, "retry_in_ms",
                     &retry_in, st) ||
        !check_bound(a->has_retries_left, a->retries_left, 0, o->retries_max, true, "retries_left",
                     &retries_left, st) ||
        !check_error(&a->error, st))
        return false;
    in->retry_in_ms = retry_in;
    in->retries_left = (uint32_t)retries_left;
    return true;
}

void rules_fail_outcome(const engine_options *o, const engine_fail_args *a, const rules_fail_in *in,
                        uint32_t failures, uint32_t retries_left, uint64_t now_ms,
                        rules_fail_out *out)
{
    out->failures = failures + 1;
    if (a->has_retries_left)
        retries_left = in->retries_left;
    else if (retries_left > 0)
        retries_left--;
    out->retries_left = retries_left;
    out->terminal = retries_left == 0;
    out->pause_ms = 0;
    out->available_at_ms = 0;
    if (out->terminal)
        return;
    out->pause_ms = a->has_retry_in_ms ? in->retry_in_ms
                                       : check_backoff(o->backoff_initial_ms, o->backoff_max_ms,
                                                       out->failures, o->backoff_jitter);
    out->available_at_ms = now_ms + out->pause_ms;
}

bool rules_extend_check(const engine_options *o, const engine_extend_args *a, uint64_t *lock_ms,
                        engine_status *st)
{
    return check_bound(a->has_lock_ms, a->lock_ms, o->lock_default_ms, o->lock_max_ms, false,
                       "lock_ms", lock_ms, st);
}

/* ---- fetch (R6) --------------------------------------------------------- */

bool rules_fetch_check(const engine_options *o, const engine_fetch_args *a,
                       bool (*declared)(void *ctx, const char *topic), void *ctx, rules_fetch *out,
                       engine_status *st)
{
    if (!check_text(a->worker_id, ENGINE_WORKER_ID_MAX, true, "worker_id", st))
        return false;
    if (a->n_topics == 0) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "topics: at least one is required");
        snprintf(st->field, sizeof(st->field), "topics");
        return false;
    }
    if (a->n_topics > o->topics_max) {
        reply_over_ceiling(st, "topics", a->n_topics, o->topics_max);
        return false;
    }
    for (size_t i = 0; i < a->n_topics; i++) {
        if (!check_topic(a->topics[i], "topics", st))
            return false;
        if (o->strict_channels && !declared(ctx, a->topics[i])) {
            reply_status(st, ENGINE_CODE_NOT_FOUND, "topic %s is not a declared channel",
                         a->topics[i]);
            snprintf(st->field, sizeof(st->field), "topics");
            return false;
        }
    }
    if (a->n_completes > o->batch_max) {
        reply_over_ceiling(st, "completes", a->n_completes, o->batch_max);
        return false;
    }
    return check_bound(a->has_max_tasks, a->max_tasks, o->batch_default, o->batch_max, false,
                       "max_tasks", &out->max_tasks, st) &&
           check_bound(a->has_lock_ms, a->lock_ms, o->lock_default_ms, o->lock_max_ms, false,
                       "lock_ms", &out->lock_ms, st) &&
           check_bound(a->has_wait_ms, a->wait_ms, o->wait_default_ms, o->wait_max_ms, true,
                       "wait_ms", &out->wait_ms, st);
}

/* ---- A task's answer ---------------------------------------------------- */

/* A call's reserved header values: its instance id, then its attempt. */
#define CALL_VALUES_LEN (ENGINE_ID_STR + 12)

bool rules_task_mem(engine_reply *r, const store_body *b, engine_header **hs, char **call)
{
    size_t nh = b->n_headers + (b->has_instance ? 2 : 0);
    *hs = NULL;
    *call = NULL;
    return !((nh && (*hs = reply_mem(r, nh * sizeof(**hs))) == NULL) ||
             (b->has_instance && (*call = reply_mem(r, CALL_VALUES_LEN)) == NULL));
}

void rules_task_answer(engine_task *et, const rules_task_view *v, engine_header *hs, char *call)
{
    const store_body *b = v->body;
    memset(et, 0, sizeof(*et));
    store_id_format(v->id, et->id);
    et->topic = b->topic;
    et->payload = b->payload;
    et->payload_len = b->payload_len;
    for (size_t i = 0; i < b->n_headers; i++)
        hs[i] = (engine_header){b->headers[i].name, b->headers[i].value};
    size_t nh = b->n_headers;
    if (b->has_instance) {
        store_id_format(b->instance_id, et->instance_id);
        memcpy(call, et->instance_id, ENGINE_ID_STR);
        snprintf(call + ENGINE_ID_STR, CALL_VALUES_LEN - ENGINE_ID_STR, "%u", b->call_attempt);
        hs[nh++] = (engine_header){ENGINE_HEADER_INSTANCE, call};
        hs[nh++] = (engine_header){ENGINE_HEADER_ATTEMPT, call + ENGINE_ID_STR};
    }
    et->headers = hs;
    et->n_headers = nh;
    et->content_type = b->content_type;
    et->attempt = v->attempt;
    et->retries_left = v->retries_left;
    store_id_format(v->lock_token, et->lock_token);
    et->lock_expires_at_ms = v->lock_expires_at_ms;
    et->created_at_ms = v->created_at_ms;
    et->priority = v->priority;
    et->available_at_ms = v->available_at_ms;
}

bool rules_task_info_body(engine_reply *r, const store_body *b, engine_task_info *i)
{
    engine_header *hs = b->n_headers ? reply_mem(r, b->n_headers * sizeof(*hs)) : NULL;
    if (b->n_headers && hs == NULL)
        return false;
    for (size_t k = 0; k < b->n_headers; k++) {
        hs[k].name = reply_strdup(r, b->headers[k].name);
        hs[k].value = reply_strdup(r, b->headers[k].value);
        if (hs[k].name == NULL || hs[k].value == NULL)
            return false;
    }
    i->headers = hs;
    i->n_headers = b->n_headers;
    if (b->content_type != NULL && (i->content_type = reply_strdup(r, b->content_type)) == NULL)
        return false;
    size_t shown = b->payload_len < ENGINE_TASK_INFO_PAYLOAD_MAX ? b->payload_len
                                                                 : ENGINE_TASK_INFO_PAYLOAD_MAX;
    uint8_t *p = shown ? reply_mem(r, shown) : NULL;
    if (shown && p == NULL)
        return false;
    if (shown)
        memcpy(p, b->payload, shown);
    i->payload = p;
    i->payload_shown = shown;
    return true;
}

/* ---- submit, submit_batch, call (R6, R18) ------------------------------- */

/* When and how urgently (R6): a delay or an instant, not both, at most
 * delay_max_ms ahead; a priority at most priority_max. An instant already
 * past is "now". */
static bool when_check(const engine_options *o, uint64_t now_ms, const engine_submit_args *a,
                       engine_status *st)
{
    uint64_t v;
    if (a->has_not_before_ms && a->has_delay_ms) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                     "delay_ms: give not_before_ms or delay_ms, not both");
        snprintf(st->field, sizeof(st->field), "delay_ms");
        return false;
    }
    if (a->has_not_before_ms && a->not_before_ms > now_ms + o->delay_max_ms) {
        reply_over_ceiling(st, "not_before_ms", a->not_before_ms, now_ms + o->delay_max_ms);
        return false;
    }
    return check_bound(a->has_delay_ms, a->delay_ms, 0, o->delay_max_ms, true, "delay_ms", &v,
                       st) &&
           check_bound(a->has_priority, a->priority, o->priority_default, o->priority_max, true,
                       "priority", &v, st);
}

bool rules_submit_check(const engine_options *o, uint64_t now_ms, const engine_submit_args *a,
                        engine_status *st)
{
    if (a->payload_len > o->payload_max_bytes) {
        reply_over_ceiling(st, "payload", a->payload_len, o->payload_max_bytes);
        return false;
    }
    return when_check(o, now_ms, a, st) && check_headers(a->headers, a->n_headers, "headers", st) &&
           check_text(a->content_type, ENGINE_CONTENT_TYPE_MAX, false, "content_type", st) &&
           check_text(a->idempotency_key, BERTH_IDEM_KEY_MAX, false, "idempotency_key", st);
}

void rules_item_name(engine_status *st, size_t i)
{
    char field[sizeof(st->field)], msg[sizeof(st->message)];
    snprintf(field, sizeof(field), "items[%zu].%.35s", i, st->field);
    snprintf(msg, sizeof(msg), "items[%zu].%.227s", i, st->message);
    memcpy(st->field, field, sizeof(field));
    memcpy(st->message, msg, sizeof(msg));
}

bool rules_call_policy(const engine_options *o, const engine_retry_policy *r, rules_policy *out,
                       engine_status *st)
{
    uint64_t v;
    if (!r->has_timeout_ms) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                     "retry.timeout_ms: required with a retry policy (per attempt, > 0)");
        snprintf(st->field, sizeof(st->field), "retry.timeout_ms");
        return false;
    }
    if (!check_bound(true, r->timeout_ms, 0, o->call_timeout_max_ms, false, "retry.timeout_ms", &v,
                     st))
        return false;
    out->timeout_ms = v;
    if (!check_bound(r->has_max_attempts, r->max_attempts, 1, o->call_attempts_max, false,
                     "retry.max_attempts", &v, st))
        return false;
    out->max_attempts = (uint32_t)v;
    uint64_t max_def = o->backoff_max_ms;
    if (!check_bound(r->has_max_backoff_ms, r->max_backoff_ms, max_def, o->backoff_max_ms, false,
                     "retry.max_backoff_ms", &v, st))
        return false;
    out->max_backoff_ms = v;
    uint64_t init_def = o->backoff_initial_ms < v ? o->backoff_initial_ms : v;
    if (!check_bound(r->has_initial_backoff_ms, r->initial_backoff_ms, init_def,
                     out->max_backoff_ms, false, "retry.initial_backoff_ms", &v, st))
        return false;
    out->initial_backoff_ms = v;
    double m = r->has_multiplier ? r->multiplier : 2.0;
    if (!(m >= 1.0 && m <= 10.0)) { /* NaN fails too */
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                     "retry.multiplier: %g is outside 1.0 to 10.0", m);
        snprintf(st->field, sizeof(st->field), "retry.multiplier");
        return false;
    }
    out->multiplier = m;
    if (r->n_non_retryable_codes > ENGINE_HEADERS_MAX) {
        reply_over_ceiling(st, "retry.non_retryable_codes", r->n_non_retryable_codes,
                           ENGINE_HEADERS_MAX);
        return false;
    }
    for (size_t k = 0; k < r->n_non_retryable_codes; k++)
        if (!check_text(r->non_retryable_codes[k], ENGINE_ERROR_CODE_MAX, true,
                        "retry.non_retryable_codes", st))
            return false;
    return true;
}

/* ---- Intake (R10) ------------------------------------------------------- */

__attribute__((format(printf, 5, 6))) static void
refuse(engine_status *st, engine_code code, const char *ec, bool retryable, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_vstatus(st, code, fmt, ap);
    va_end(ap);
    st->engine_code = ec;
    st->retryable = retryable;
}

bool rules_intake_validate(const engine_options *o, const rules_channel *c, const char *topic,
                           const rules_reply *in, engine_status *st)
{
    uint64_t max = c && c->reply_max_bytes ? c->reply_max_bytes : o->payload_max_bytes;
    if (in->payload_len > max) {
        refuse(st, ENGINE_CODE_INVALID_ARGUMENT, ENGINE_EC_VALIDATION_REJECTED, false,
               "result.payload: %zu bytes is over channel %s's reply ceiling of %llu bytes",
               in->payload_len, topic, (unsigned long long)max);
        snprintf(st->field, sizeof(st->field), "result.payload");
        st->has_limit = true;
        st->limit = max;
        return false;
    }
    if (c != NULL && c->n_content_types > 0) {
        const char *ct = in->content_type ? in->content_type : "";
        bool ok = false;
        for (size_t i = 0; i < c->n_content_types && !ok; i++)
            ok = strcmp(ct, c->content_types[i]) == 0;
        if (!ok) {
            refuse(st, ENGINE_CODE_INVALID_ARGUMENT, ENGINE_EC_VALIDATION_REJECTED, false,
                   "result.content_type: \"%.64s\" is not accepted on channel %s", ct, topic);
            return false;
        }
    }
    if (!check_text(in->content_type, ENGINE_CONTENT_TYPE_MAX, false, "result.content_type", st) ||
        !check_headers(in->headers, in->n_headers, "result.headers", st)) {
        st->engine_code = ENGINE_EC_VALIDATION_REJECTED;
        st->retryable = false;
        return false;
    }
    return true;
}

rules_corr rules_correlate(const rules_call *c, uint32_t parked_attempt, engine_status *st)
{
    if (!c->found || c->ended)
        return RULES_CORR_ABSORB; /* the call has ended */
    if (c->state == ENGINE_INSTANCE_BACKOFF) {
        refuse(st, ENGINE_CODE_FAILED_PRECONDITION, ENGINE_EC_RETRY_PENDING, false,
               "the call's attempt %u timed out and its next attempt is pending: this "
               "reply cannot resolve it",
               parked_attempt);
        return RULES_CORR_RETRY_PENDING;
    }
    /* A reply to an older attempt resolves too; the attempt in flight is
     * then not needed, unless a worker holds it (its reply is absorbed). */
    return parked_attempt != c->attempt ? RULES_CORR_RESOLVE_WITHDRAW : RULES_CORR_RESOLVE;
}

/* ---- A call's attempts -------------------------------------------------- */

void rules_call_failed_attempt(const rules_policy *p, uint32_t attempt, uint64_t now_ms,
                               double jitter, rules_call_next *out)
{
    out->fail = attempt >= p->max_attempts;
    out->retry_at_ms = 0;
    if (out->fail)
        return;
    out->retry_at_ms = now_ms + check_backoff_curve(p->initial_backoff_ms, p->max_backoff_ms,
                                                    attempt, p->multiplier, jitter);
}

void rules_call_timeout(const rules_policy *p, uint32_t attempt, char *buf, size_t n,
                        engine_error *err)
{
    snprintf(buf, n, "attempt %" PRIu32 " of %" PRIu32 " timed out after %" PRIu64 " ms%s", attempt,
             p->max_attempts, p->timeout_ms,
             attempt >= p->max_attempts ? "; no attempt is left" : "");
    *err = (engine_error){.code = ENGINE_EC_TIMEOUT, .message = buf};
}

void rules_call_poisoned(uint32_t attempt, uint32_t max_attempts, const char *why, char *buf,
                         size_t n, engine_error *err)
{
    snprintf(buf, n, "attempt %" PRIu32 " of %" PRIu32 ": its request was poisoned (%s)", attempt,
             max_attempts, why ? why : "undeliverable");
    *err = (engine_error){.code = ENGINE_EC_DELIVERY_POISONED, .message = buf};
}

bool rules_await_check(const engine_options *o, const engine_await_args *a,
                       uint8_t id[BERTH_ID_LEN], uint64_t *wait_ms, engine_status *st)
{
    if (a->instance_id == NULL || store_id_parse(a->instance_id, id) != BERTH_OK) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                     "instance_id: not an instance id (32 hex digits)");
        snprintf(st->field, sizeof(st->field), "instance_id");
        return false;
    }
    return check_bound(a->has_wait_ms, a->wait_ms, o->wait_default_ms, o->wait_max_ms, true,
                       "wait_ms", wait_ms, st);
}

void rules_await_not_found(engine_status *st, const char *id_str)
{
    reply_status(st, ENGINE_CODE_NOT_FOUND, "no call %s: it never was, or its retention has ended",
                 id_str);
    snprintf(st->field, sizeof(st->field), "instance_id");
}

void rules_instance_live(engine_instance *o, const uint8_t id[BERTH_ID_LEN],
                         engine_instance_state state, uint32_t attempt, uint64_t created_at_ms)
{
    store_id_format(id, o->id);
    o->state = state;
    o->attempt = attempt;
    o->created_at_ms = created_at_ms;
}

bool rules_instance_answer(engine_reply *r, const store_instance *rec)
{
    engine_instance *o = &r->instance;
    rules_instance_live(o, rec->id, (engine_instance_state)rec->state, rec->attempt,
                        rec->created_at_ms);
    o->resolved_at_ms = rec->ended_at_ms;
    if (rec->has_result) {
        engine_header *hs = NULL;
        if (rec->n_result_headers > 0 &&
            (hs = reply_mem(r, rec->n_result_headers * sizeof(*hs))) == NULL)
            return false;
        for (size_t k = 0; k < rec->n_result_headers; k++)
            hs[k] = (engine_header){rec->result_headers[k].name, rec->result_headers[k].value};
        o->has_result = true;
        o->result = (engine_result){
            .payload = rec->result_payload,
            .payload_len = rec->result_payload_len,
            .content_type = rec->result_content_type,
            .headers = hs,
            .n_headers = rec->n_result_headers,
        };
    }
    if (rec->error.code != NULL || rec->error.message != NULL || rec->error.details != NULL) {
        o->has_error = true;
        o->error = (engine_error){rec->error.code, rec->error.message, rec->error.details};
    }
    return true;
}

/* ---- Waits, deployments ------------------------------------------------- */

bool rules_wait_may(const engine_options *o, uint64_t waiting, bool has_owner,
                    uint32_t owner_waiting, engine_status *st)
{
    if (waiting >= o->waits_max) {
        reply_status(st, ENGINE_CODE_RESOURCE_EXHAUSTED,
                     "%llu requests are waiting already, the most berthd keeps (waits-max): "
                     "ask again later, or with wait_ms 0",
                     (unsigned long long)waiting);
    } else if (has_owner && owner_waiting >= o->waits_per_owner_max) {
        reply_status(st, ENGINE_CODE_RESOURCE_EXHAUSTED,
                     "this connection has %u requests waiting already, the most it may "
                     "(waits-per-connection)",
                     owner_waiting);
    } else {
        return true;
    }
    st->engine_code = ENGINE_EC_ENGINE_UNAVAILABLE;
    st->retryable = true;
    return false;
}

static void name_field(engine_status *st, size_t i, const char *what)
{
    snprintf(st->field, sizeof(st->field), "channels[%zu].%s", i, what);
}

static bool check_channel(const engine_options *o, const engine_channel *c, size_t i,
                          engine_status *st)
{
    char field[64];
    snprintf(field, sizeof(field), "channels[%zu].name", i);
    if (!check_topic(c->name, field, st))
        return false;
    int kind = check_transport(c->transport);
    if (kind == CHECK_TRANSPORT_NONE || (kind == CHECK_TRANSPORT_PUSH && o->push_fn == NULL)) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                     "channels[%zu].transport: no sink serves \"%.64s\" (pull, "
                     "nng+req://HOST:PORT, nng+req+ipc:///PATH, nng+req+tls://HOST:PORT)%s",
                     i, c->transport,
                     kind == CHECK_TRANSPORT_PUSH ? ": this engine has no push transport" : "");
        name_field(st, i, "transport");
        return false;
    }
    if (c->reply_max_bytes > o->payload_max_bytes) {
        snprintf(field, sizeof(field), "channels[%zu].reply_max_bytes", i);
        reply_over_ceiling(st, field, c->reply_max_bytes, o->payload_max_bytes);
        return false;
    }
    if (c->n_content_types > ENGINE_CHANNEL_TYPES_MAX) {
        snprintf(field, sizeof(field), "channels[%zu].content_types", i);
        reply_over_ceiling(st, field, c->n_content_types, ENGINE_CHANNEL_TYPES_MAX);
        return false;
    }
    snprintf(field, sizeof(field), "channels[%zu].content_types", i);
    for (size_t k = 0; k < c->n_content_types; k++)
        if (!check_text(c->content_types[k], ENGINE_CONTENT_TYPE_MAX, true, field, st))
            return false;
    return true;
}

bool rules_deploy_check(const engine_options *o, const char *id, const engine_channel *cs, size_t n,
                        engine_status *st)
{
    if (!check_topic(id, "id", st))
        return false;
    if (strlen(id) > ENGINE_DEPLOYMENT_ID_MAX) {
        reply_over_ceiling(st, "id", strlen(id), ENGINE_DEPLOYMENT_ID_MAX);
        return false;
    }
    if (n == 0) {
        reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "channels: at least one is required");
        snprintf(st->field, sizeof(st->field), "channels");
        return false;
    }
    if (n > ENGINE_DEPLOY_CHANNELS_MAX) {
        reply_over_ceiling(st, "channels", n, ENGINE_DEPLOY_CHANNELS_MAX);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!check_channel(o, &cs[i], i, st))
            return false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(cs[i].name, cs[j].name) == 0) {
                reply_status(st, ENGINE_CODE_INVALID_ARGUMENT,
                             "channels[%zu].name: channel %s is declared twice", i, cs[i].name);
                name_field(st, i, "name");
                return false;
            }
    }
    return true;
}

/* ---- Routes ------------------------------------------------------------ */

void rules_route_draining(engine_status *st, const char *name)
{
    reply_status(st, ENGINE_CODE_FAILED_PRECONDITION,
                 "channel %s is declared only by draining deployments: it takes no new work", name);
    snprintf(st->field, sizeof(st->field), "topic");
}

void rules_route_undeclared(engine_status *st, const char *name)
{
    reply_status(st, ENGINE_CODE_NOT_FOUND, "topic %s is not a declared channel", name);
    snprintf(st->field, sizeof(st->field), "topic");
}

void rules_deploy_conflict(engine_status *st, size_t i, const char *name, const char *live_id,
                           uint32_t live_version)
{
    reply_status(st, ENGINE_CODE_FAILED_PRECONDITION,
                 "channels[%zu].name: channel %s is declared by live deployment %s "
                 "(version %u); retire it first",
                 i, name, live_id, live_version);
    name_field(st, i, "name");
}

void rules_deploy_unknown(engine_status *st, const char *id)
{
    reply_status(st, ENGINE_CODE_NOT_FOUND, "no deployment %s", id);
    snprintf(st->field, sizeof(st->field), "id");
}

void rules_deploy_full(engine_status *st)
{
    reply_status(st, ENGINE_CODE_RESOURCE_EXHAUSTED,
                 "%d deployment versions are kept already, none of them retired and "
                 "holding nothing",
                 ENGINE_DEPLOYMENTS_MAX);
}

void rules_push_answer(int outcome, engine_error *err, engine_status *bad, char *buf, size_t n)
{
    if (!check_error(err, bad))
        *err = (engine_error){.code = "RECEIVER_ERROR_INVALID", .message = bad->message};
    snprintf(buf, n, "the push receiver answered %s%s%.64s%s%.200s",
             outcome == ENGINE_PUSH_RETRY ? "RETRY" : "no outcome", err->code ? ": " : "",
             err->code ? err->code : "", err->message ? ": " : "",
             err->message ? err->message : "");
}

bool rules_delivery_id(const char *s, uint8_t id[BERTH_ID_LEN], engine_status *st)
{
    if (s != NULL && store_id_parse(s, id) == BERTH_OK)
        return true;
    reply_status(st, ENGINE_CODE_INVALID_ARGUMENT, "id: not a delivery id (32 hex digits)");
    return false;
}

void rules_delivery_not_found(engine_status *st, const char *id)
{
    reply_status(st, ENGINE_CODE_NOT_FOUND, "no delivery %s in the outbox", id);
}

void rules_delivery_not_poisoned(engine_status *st, const char *id)
{
    reply_status(st, ENGINE_CODE_FAILED_PRECONDITION, "delivery %s is not poisoned", id);
}
