/*
 * watch.c — berth watch: berthd's events (task.parked.<topic>,
 * task.completed.<topic>, ...) as they happen, from its PUB socket, one
 * line or one JSON object each, until Ctrl-C or --count events. Each
 * message is the subject, a NUL, then the Event (berth/v1), which may be
 * absent. berth.c's command table runs cmd_watch.
 */
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "tools/cli/cli.h"

static volatile sig_atomic_t stop_watch;

static void on_sigint(int sig)
{
    (void)sig;
    stop_watch = 1;
}

/* One event; its subject is body's first sl bytes, ev NULL when it
 * carried none (or one that did not decode). */
static void print_event(const opts *o, const char *body, size_t sl, const Berth__V1__Event *ev)
{
    if (!o->json) {
        printf("%.*s\t%s", (int)sl, body, ev && ev->task_id ? ev->task_id : "");
        if (ev != NULL && ev->error != NULL)
            printf("\t%s\t%s", ev->error->code ? ev->error->code : "",
                   ev->error->message ? ev->error->message : "");
        putchar('\n');
        return;
    }
    printf("{\"subject\":");
    cli_json_str(stdout, body, sl);
    if (ev != NULL) {
        printf(",\"topic\":");
        cli_json_cstr(stdout, ev->topic);
        printf(",\"task_id\":");
        cli_json_cstr(stdout, ev->task_id);
        printf(",\"at_ms\":%" PRIu64, ev->at_ms);
        if (ev->has_retries_left)
            printf(",\"retries_left\":%u", ev->retries_left);
        if (ev->error != NULL) {
            printf(",\"error\":{\"code\":");
            cli_json_cstr(stdout, ev->error->code);
            printf(",\"message\":");
            cli_json_cstr(stdout, ev->error->message);
            putchar('}');
        }
    }
    printf("}\n");
}

/* A SUB socket dialled to the events URL, subscribed to the prefixes
 * given (all when none); 0 or nng's error. */
static int subscribe(const opts *o, nng_socket *s)
{
    int rv = nng_sub0_open(s);
    if (rv == 0)
        rv = nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, 200);
    for (int i = 0; rv == 0 && i < o->npos; i++)
        rv = nng_socket_set(*s, NNG_OPT_SUB_SUBSCRIBE, o->pos[i], strlen(o->pos[i]));
    if (rv == 0 && o->npos == 0)
        rv = nng_socket_set(*s, NNG_OPT_SUB_SUBSCRIBE, "", 0);
    if (rv == 0)
        rv = nng_dial(*s, o->events, NULL, 0);
    return rv;
}

int cmd_watch(opts *o)
{
    nng_socket s;
    int rv = subscribe(o, &s);
    if (rv != 0) {
        fprintf(stderr, "berth: cannot watch %s: %s\n", o->events, nng_strerror(rv));
        nng_close(s);
        return EX_UNREACHABLE;
    }
    if (!o->json && isatty(STDERR_FILENO))
        fprintf(stderr, "watching %s (Ctrl-C to stop)\n", o->events);
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    uint64_t seen = 0;
    while (!stop_watch && (!o->has_count || seen < o->count)) {
        nng_msg *m;
        if (nng_recvmsg(s, &m, 0) != 0)
            continue;
        const char *body = nng_msg_body(m);
        size_t len = nng_msg_len(m), sl = strnlen(body, len);
        Berth__V1__Event *ev =
            sl < len ? berth__v1__event__unpack(NULL, len - sl - 1, (const uint8_t *)body + sl + 1)
                     : NULL;
        print_event(o, body, sl, ev);
        fflush(stdout);
        if (ev != NULL)
            berth__v1__event__free_unpacked(ev, NULL);
        nng_msg_free(m);
        seen++;
    }
    /* Not closed: the process ends here, and with libnng 1.5.2 closing a
     * SUB socket while an event is arriving can wait forever for a receive
     * that never completes (berthd publishes every event to every
     * subscriber, so one is often arriving). */
    return EX_OK;
}
