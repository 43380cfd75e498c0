/*
 * admin_cmds.c — berth admin SUBCOMMAND, berth stats and berth top: the
 * operator's side of berthd. The subcommands' table below dispatches
 * `berth admin` (and names them in its usage error); a new subcommand is
 * one entry there. Each builds its AdminRequest and hands it, with the
 * printer of its answer, to cli_admin_run (rpc.c), which signs, sends,
 * and tells a refusal. The deployments' subcommands are in deploy_cmds.c.
 */
#include <inttypes.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tools/cli/cli.h"
#include "tools/cli/top.h"

/* ---- a task's state ---- */

static void print_task_info_json(const Berth__V1__TaskInfo *t)
{
    printf("{\"id\":");
    cli_json_cstr(stdout, t->id);
    printf(",\"topic\":");
    cli_json_cstr(stdout, t->topic);
    printf(",\"state\":\"%s\",\"worker_id\":", cli_task_state_name(t->state));
    cli_json_cstr(stdout, t->worker_id);
    printf(",\"lock_expires_at_ms\":%" PRIu64 ",\"available_at_ms\":%" PRIu64
           ",\"attempt\":%u,\"retries_left\":%u,\"created_at_ms\":%" PRIu64 ",\"payload_bytes\":%u"
           ",\"priority\":%u",
           t->lock_expires_at_ms, t->available_at_ms, t->attempt, t->retries_left, t->created_at_ms,
           t->payload_bytes, t->priority);
    cli_print_error_json("last_error", t->last_error);
    putchar('}');
}

static int show_task(const opts *o, const Berth__V1__AdminResponse *r)
{
    const Berth__V1__TaskInfo *t = r->get_task ? r->get_task->task : NULL;
    if (t == NULL)
        return EX_OK;
    if (o->json) {
        printf("{\"task\":");
        print_task_info_json(t);
        printf("}\n");
        return EX_OK;
    }
    printf("id             %s\ntopic          %s\nstate          %s\n", t->id ? t->id : "",
           t->topic ? t->topic : "", cli_task_state_name(t->state));
    printf("attempt        %u\nretries left   %u\npayload bytes  %u\npriority       %u\n",
           t->attempt, t->retries_left, t->payload_bytes, t->priority);
    printf("available at   %" PRIu64 " (Unix ms)\n", t->available_at_ms);
    if (t->worker_id)
        printf("worker         %s (lock until %" PRIu64 ")\n", t->worker_id, t->lock_expires_at_ms);
    if (t->last_error)
        printf("last error     %s: %s\n", t->last_error->code ? t->last_error->code : "",
               t->last_error->message ? t->last_error->message : "");
    return EX_OK;
}

/* ---- the subcommands on one task or delivery, by ID ---- */

static int cmd_admin_task(opts *o)
{
    const char *id = cli_admin_id(o);
    if (id == NULL)
        return EX_USAGE;
    Berth__V1__GetTaskRequest get = BERTH__V1__GET_TASK_REQUEST__INIT;
    get.id = (char *)id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_GET_TASK;
    req.get_task = &get;
    return cli_admin_run(o, &req, 0, show_task, NULL);
}

static int cmd_admin_retry(opts *o)
{
    const char *id = cli_admin_id(o);
    if (id == NULL)
        return EX_USAGE;
    Berth__V1__RetryTerminalRequest retry = BERTH__V1__RETRY_TERMINAL_REQUEST__INIT;
    retry.id = (char *)id;
    retry.has_retries = o->has_retries;
    retry.retries = (uint32_t)o->retries;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_TERMINAL;
    req.retry_terminal = &retry;
    return cli_admin_run(o, &req, 0, NULL, "retried: fetchable again");
}

static int cmd_admin_discard(opts *o)
{
    const char *id = cli_admin_id(o);
    if (id == NULL)
        return EX_USAGE;
    Berth__V1__DiscardTerminalRequest discard = BERTH__V1__DISCARD_TERMINAL_REQUEST__INIT;
    discard.id = (char *)id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DISCARD_TERMINAL;
    req.discard_terminal = &discard;
    return cli_admin_run(o, &req, 0, NULL, "discarded");
}

static int cmd_admin_retry_delivery(opts *o)
{
    const char *id = cli_admin_id(o);
    if (id == NULL)
        return EX_USAGE;
    Berth__V1__RetryDeliveryRequest redeliver = BERTH__V1__RETRY_DELIVERY_REQUEST__INIT;
    redeliver.id = (char *)id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETRY_DELIVERY;
    req.retry_delivery = &redeliver;
    return cli_admin_run(o, &req, 0, NULL, "re-armed: delivered again");
}

/* ---- listings ---- */

static int show_incidents(const opts *o, const Berth__V1__AdminResponse *r)
{
    static const char *const kinds[] = {"?", "delivery_poisoned", "task_terminal",
                                        "result_refused"};
    const Berth__V1__ListIncidentsResponse *li = r->list_incidents;
    size_t n = li ? li->n_incidents : 0;
    if (o->json)
        printf("{\"incidents\":[");
    for (size_t i = 0; i < n; i++) {
        const Berth__V1__Incident *in = li->incidents[i];
        const char *kind = in->kind >= 0 && in->kind <= 3 ? kinds[in->kind] : "?";
        if (o->json) {
            printf("%s{\"id\":", i ? "," : "");
            cli_json_cstr(stdout, in->id);
            printf(",\"kind\":\"%s\",\"subject_id\":", kind);
            cli_json_cstr(stdout, in->subject_id);
            printf(",\"topic\":");
            cli_json_cstr(stdout, in->topic);
            printf(",\"at_ms\":%" PRIu64 ",\"open\":%s", in->at_ms, in->open ? "true" : "false");
            cli_print_error_json("error", in->error);
            putchar('}');
        } else {
            printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in->id ? in->id : "", kind,
                   in->open ? "open" : "closed", in->subject_id ? in->subject_id : "",
                   in->topic ? in->topic : "", in->error && in->error->code ? in->error->code : "",
                   in->error && in->error->message ? in->error->message : "");
        }
    }
    const char *next = li && li->next_after_id ? li->next_after_id : NULL;
    if (o->json) {
        printf("]");
        if (next != NULL) {
            printf(",\"next_after_id\":");
            cli_json_cstr(stdout, next);
        }
        printf("}\n");
    } else if (next != NULL) {
        fprintf(stderr, "more: --after %s\n", next);
    }
    return EX_OK;
}

static int cmd_admin_incidents(opts *o)
{
    Berth__V1__ListIncidentsRequest l = BERTH__V1__LIST_INCIDENTS_REQUEST__INIT;
    l.has_limit = o->has_limit;
    l.limit = (uint32_t)o->limit;
    l.after_id = (char *)o->after;
    l.has_open_only = o->open_only;
    l.open_only = o->open_only;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_INCIDENTS;
    req.list_incidents = &l;
    return cli_admin_run(o, &req, 0, show_incidents, NULL);
}

static int show_tasks(const opts *o, const Berth__V1__AdminResponse *r)
{
    const Berth__V1__ListTasksResponse *lt = r->list_tasks;
    size_t n = lt ? lt->n_tasks : 0;
    const char *next = lt ? lt->next_after_id : NULL;
    if (o->json) {
        printf("{\"tasks\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                putchar(',');
            print_task_info_json(lt->tasks[i]);
        }
        printf("],\"next_after_id\":");
        cli_json_cstr(stdout, next);
        printf("}\n");
        return EX_OK;
    }
    for (size_t i = 0; i < n; i++) {
        const Berth__V1__TaskInfo *t = lt->tasks[i];
        printf("%s\t%s\t%s\t%u\t%u\t%s\n", t->id ? t->id : "", t->topic ? t->topic : "",
               cli_task_state_name(t->state), t->attempt, t->retries_left,
               t->last_error && t->last_error->code ? t->last_error->code : "");
    }
    if (next != NULL)
        fprintf(stderr, "more: berth admin tasks ... --after %s\n", next);
    return EX_OK;
}

static int cmd_admin_tasks(opts *o)
{
    Berth__V1__ListTasksRequest l = BERTH__V1__LIST_TASKS_REQUEST__INIT;
    l.has_limit = o->has_limit;
    l.limit = (uint32_t)o->limit;
    l.after_id = (char *)o->after;
    l.topic = (char *)o->topic;
    if (o->state != NULL) {
        int s = 0;
        for (int k = 1; k <= 5 && s == 0; k++)
            if (strcasecmp(o->state, cli_task_state_name(k)) == 0)
                s = k;
        if (s == 0) {
            fprintf(stderr, "berth admin tasks: --state is ready, delayed, locked, backoff or "
                            "terminal\n");
            return EX_USAGE;
        }
        l.has_state = 1;
        l.state = (Berth__V1__TaskInfo__State)s;
    }
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_TASKS;
    req.list_tasks = &l;
    return cli_admin_run(o, &req, 0, show_tasks, NULL);
}

/* ---- a backup ---- */

static int show_checkpoint(const opts *o, const Berth__V1__AdminResponse *r)
{
    if (o->json) {
        printf("{\"ok\":true,\"dir\":");
        cli_json_cstr(stdout, r->checkpoint ? r->checkpoint->dir : NULL);
        printf("}\n");
    } else {
        printf("checkpoint in %s: berthd --data %s serves it\n", o->pos[1], o->pos[1]);
    }
    return EX_OK;
}

static int cmd_admin_checkpoint(opts *o)
{
    if (o->npos != 2) {
        fprintf(stderr, "berth admin checkpoint: DIR (absolute, on berthd's machine, new)\n");
        return EX_USAGE;
    }
    Berth__V1__CheckpointRequest c = BERTH__V1__CHECKPOINT_REQUEST__INIT;
    c.dir = (char *)o->pos[1];
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_CHECKPOINT;
    req.checkpoint = &c;
    /* A checkpoint flushes and links the store's files: give it time. */
    int timeout_ms = o->timeout_ms < 120000 ? 120000 : o->timeout_ms;
    return cli_admin_run(o, &req, timeout_ms, show_checkpoint, NULL);
}

/* ---- berth admin SUBCOMMAND ---- */

typedef struct subcommand {
    const char *name;
    int (*run)(opts *o);
} subcommand;

/* In the order the usage error names them. */
static const subcommand subcommands[] = {
    {"task", cmd_admin_task},
    {"retry", cmd_admin_retry},
    {"discard", cmd_admin_discard},
    {"incidents", cmd_admin_incidents},
    {"retry-delivery", cmd_admin_retry_delivery},
    {"tasks", cmd_admin_tasks},
    {"checkpoint", cmd_admin_checkpoint},
    {"deploy", cmd_admin_deploy},
    {"retire", cmd_admin_retire},
    {"deployments", cmd_admin_deployments},
};

#define N_SUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

int cmd_admin(opts *o)
{
    const char *sub = o->npos > 0 ? o->pos[0] : "";
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        if (strcmp(sub, subcommands[i].name) == 0)
            return subcommands[i].run(o);
    fputs("berth admin: ", stderr);
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(stderr, "%s%s", i ? "|" : "", subcommands[i].name);
    fputs(" (see berth admin --help)\n", stderr);
    return EX_USAGE;
}

/* ---- berth stats, berth top ---- */

static int show_stats(const opts *o, const Berth__V1__AdminResponse *r)
{
    const Berth__V1__StatsResponse *st = r->stats;
    if (st == NULL)
        return EX_INTERNAL;
    if (o->json) {
        printf("{\"tasks\":%" PRIu64 ",\"outbox_pending\":%" PRIu64 ",\"poisoned\":%" PRIu64
               ",\"waiting_fetches\":%" PRIu64 ",\"topics\":[",
               st->tasks, st->outbox_pending, st->poisoned, st->waiting_fetches);
        for (size_t i = 0; i < st->n_topics; i++) {
            const Berth__V1__TopicStats *t = st->topics[i];
            printf("%s{\"topic\":", i ? "," : "");
            cli_json_cstr(stdout, t->topic);
            printf(",\"ready\":%" PRIu64 ",\"delayed\":%" PRIu64 ",\"locked\":%" PRIu64
                   ",\"backoff\":%" PRIu64 ",\"terminal\":%" PRIu64 ",\"waiting_fetches\":%" PRIu64
                   "}",
                   t->ready, t->delayed, t->locked, t->backoff, t->terminal, t->waiting_fetches);
        }
        printf("]}\n");
        return EX_OK;
    }
    printf("%-32s %10s %10s %10s %10s %10s %8s\n", "topic", "ready", "delayed", "locked", "backoff",
           "terminal", "waiting");
    for (size_t i = 0; i < st->n_topics; i++) {
        const Berth__V1__TopicStats *t = st->topics[i];
        printf("%-32s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
               " %8" PRIu64 "\n",
               t->topic ? t->topic : "", t->ready, t->delayed, t->locked, t->backoff, t->terminal,
               t->waiting_fetches);
    }
    printf("tasks %" PRIu64 "  outbox pending %" PRIu64 "  poisoned %" PRIu64
           "  waiting fetches %" PRIu64 "\n",
           st->tasks, st->outbox_pending, st->poisoned, st->waiting_fetches);
    return EX_OK;
}

int cmd_stats(opts *o)
{
    Berth__V1__StatsRequest s = BERTH__V1__STATS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_STATS;
    req.stats = &s;
    return cli_admin_run(o, &req, 0, show_stats, NULL);
}

int cmd_top(opts *o)
{
    return top_run(o->metrics, o->has_count ? (long)o->count : 0, isatty(STDOUT_FILENO) && !o->json,
                   o->json);
}
