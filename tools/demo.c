/*
 * berth-demo — the engine in process: submit, fetch, complete, on the
 * embedded store. A smoke test a person can run; the daemon (berthd)
 * serves the same engine over nng.
 *
 *   berth-demo [DATA_DIR]     (default ./var/berth)
 */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "store/err.h"

static int fail(const char *what, const engine_reply *r)
{
    fprintf(stderr, "berth-demo: %s: %s\n", what, r ? r->status.message : "not queued");
    return 1;
}

int main(int argc, char **argv)
{
    engine_options o;
    engine_options_default(&o);
    if (argc > 1)
        o.data_dir = argv[1];
    char err[256];
    engine *e;
    int rv = engine_open(&o, &e, err, sizeof(err));
    if (rv != BERTH_OK) {
        fprintf(stderr, "berth-demo: %s\n", err);
        return 2;
    }
    printf("berth engine ready on %s\n", o.data_dir);

    static const char payload[] = "{\"order\":42}";
    engine_request sub = {.op = ENGINE_OP_SUBMIT};
    sub.u.submit = (engine_submit_args){.topic = "demo",
                                        .payload = (const uint8_t *)payload,
                                        .payload_len = sizeof(payload) - 1,
                                        .content_type = "application/json"};
    engine_reply *r = engine_exec_sync(e, &sub);
    if (r == NULL || r->status.code != ENGINE_CODE_OK)
        return fail("submit", r);
    printf("submitted %s (fsynced)\n", r->submitted[0].id);
    engine_reply_free(r);

    const char *topics[] = {"demo"};
    engine_request fetch = {.op = ENGINE_OP_FETCH};
    fetch.u.fetch = (engine_fetch_args){.worker_id = "demo-worker",
                                        .topics = topics,
                                        .n_topics = 1,
                                        .has_wait_ms = true,
                                        .wait_ms = 0};
    r = engine_exec_sync(e, &fetch);
    if (r == NULL || r->status.code != ENGINE_CODE_OK)
        return fail("fetch", r);
    printf("fetched %zu task(s)\n", r->n_tasks);
    for (size_t i = 0; i < r->n_tasks; i++) {
        const engine_task *t = &r->tasks[i];
        printf("  %s topic=%s attempt=%u payload=%.*s\n", t->id, t->topic, t->attempt,
               (int)t->payload_len, (const char *)t->payload);
        engine_request c = {.op = ENGINE_OP_COMPLETE};
        c.u.complete.guard = (engine_guard){t->id, "demo-worker", t->lock_token};
        engine_reply *cr = engine_exec_sync(e, &c);
        if (cr == NULL || cr->status.code != ENGINE_CODE_OK)
            return fail("complete", cr);
        printf("  completed %s\n", t->id);
        engine_reply_free(cr);
    }
    engine_reply_free(r);
    engine_close(e);
    return 0;
}
