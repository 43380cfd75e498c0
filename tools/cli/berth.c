/*
 * berth — the command line for berthd: its operate surface, calls, events,
 * and (berth admin ...) its admin surface, stats and top.
 *
 *   berth [--operate URL] [--json] COMMAND [ARGS]    (berth COMMAND --help)
 *
 * Output is for people by default and for scripts with --json (one JSON
 * object on stdout). fetch prints one tab-separated line per task
 * (id, lock token, topic, attempt, payload), so a shell loop can read it.
 *
 * Exit codes (stable):
 *   0  OK
 *   1  internal error
 *   2  usage error
 *   3  berthd refused the request (the status is printed); for a call
 *      awaited: it ended refused by its worker, or FAILED
 *   4  berthd is unreachable, or did not answer in time
 *   5  an awaited call has not ended yet (await it again)
 *
 * This file is main: it parses the command line into an opts (cli.h) with
 * two tables, the options and the commands, and runs the command. The
 * command table drives the lookup of the command word, berth --help,
 * berth COMMAND --help and the dispatch: a new command is one entry. The
 * commands themselves are in task_cmds.c, call_cmds.c, admin_cmds.c,
 * deploy_cmds.c (berth admin's deployments), watch.c and top.c.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "tools/cli/cli.h"

typedef struct command {
    const char *name;
    int (*run)(opts *o);
    bool attempt_timeout; /* --timeout-ms is its attempts' timeout, not berth's wait */
    const char *usage;    /* berth COMMAND --help; berth --help lists them all */
} command;

static const command commands[] = {
    {"submit", cmd_submit, false,
     "berth submit TOPIC [PAYLOAD | -] [--header NAME=VALUE]... [--content-type CT] [--key KEY]\n"
     "             [--delay DURATION | --at TIME] [--priority N]\n"
     "  Hands berthd a task; prints its id once it is on disk. '-' reads the payload from\n"
     "  stdin. --key is an idempotency key: a repeat returns the original id. --delay 10m\n"
     "  (ms, s, m, h, d; 1h30m) or --at 2026-12-24T18:00:00Z (RFC 3339) holds it back\n"
     "  until then; --priority N: lower is fetched first (default 1024).\n"},
    {"call", cmd_call, true,
     "berth call TOPIC [PAYLOAD | -] [--timeout-ms MS [--attempts N]] [--await [--wait-ms MS]]\n"
     "           [--header NAME=VALUE]... [--content-type CT] [--key KEY]\n"
     "           [--delay DURATION | --at TIME] [--priority N]\n"
     "  Hands berthd a call and prints its instance id once it is on disk; with --await,\n"
     "  waits for its outcome and prints the worker's result (exit 0), its refusal or the\n"
     "  call's failure (exit 3), or that it still waits (exit 5). --timeout-ms is each\n"
     "  attempt's timeout: past it the call is tried again, up to N attempts in all.\n"
     "  --delay, --at and --priority as for submit (a timeout runs from --delay's end).\n"},
    {"await", cmd_await, false,
     "berth await INSTANCE_ID [--wait-ms MS]\n"
     "  Waits up to MS for a call to end and prints it as berth call --await does.\n"},
    {"fetch", cmd_fetch, false,
     "berth fetch TOPIC... --worker ID [--max N] [--lock-ms MS] [--wait-ms MS]\n"
     "            [--complete ID:TOKEN]...\n"
     "  Claims up to N tasks and locks each; waits up to MS for work (long poll).\n"
     "  Prints one line per task: id, lock token, topic, attempt, payload (tab-separated).\n"
     "  --complete first completes a task you hold (no result), in the same round trip;\n"
     "  a completion refused is told on stderr (--json: complete_statuses).\n"},
    {"complete", cmd_complete, false,
     "berth complete TASK_ID --worker ID --token TOKEN [--result DATA | -] [--content-type CT]\n"
     "  Completes a task you hold. Without --result the original payload is re-delivered.\n"},
    {"fail", cmd_fail, false,
     "berth fail TASK_ID --worker ID --token TOKEN [--code C] [--message M] [--details D]\n"
     "                   [--retry-in-ms MS] [--retries-left N]\n"
     "  Reports a failure: retried after a growing pause, terminal when the budget is spent.\n"},
    {"refuse", cmd_refuse, false,
     "berth refuse TASK_ID --worker ID --token TOKEN [--code C] [--message M] [--details D]\n"
     "  Ends a task for good (a refusal is final).\n"},
    {"extend", cmd_extend, false,
     "berth extend TASK_ID --worker ID --token TOKEN [--lock-ms MS]\n"
     "  Extends your lock to MS from now.\n"},
    {"release", cmd_release, false,
     "berth release TASK_ID --worker ID --token TOKEN\n"
     "  Gives a task back: fetchable at once, no failure counted.\n"},
    {"admin", cmd_admin, false,
     "berth admin task ID | retry ID [--retries N] | discard ID | retry-delivery ID\n"
     "            | incidents [--open] [--limit N] [--after ID] | checkpoint DIR\n"
     "            | tasks [--topic T] [--state ready|delayed|locked|backoff|terminal] [--limit N]\n"
     "                    [--after NEXT]\n"
     "            | deploy ID --channel NAME[,transport=pull][,reply-max-bytes=N]\n"
     "                                  [,content-types=A|B] [--channel ...]\n"
     "            | retire ID | deployments\n"
     "            [--admin URL] [--admin-key-file FILE]\n"
     "  The operator's surface: a task's state and last error; re-offer a terminal task\n"
     "  (with a fresh failure budget, or N); discard one; re-arm a poisoned delivery;\n"
     "  incidents, oldest first, in pages; a consistent copy of the store (a backup);\n"
     "  deploy a new version of a deployment's channels (the version before drains);\n"
     "  retire one (it drains, then retires once it holds nothing pending); list them.\n"},
    {"stats", cmd_stats, false,
     "berth stats [--admin URL] [--admin-key-file FILE]\n"
     "  Tasks by topic and state, the outbox, waiting fetches.\n"},
    {"top", cmd_top, false,
     "berth top [--metrics URL[,URL...]] [--count N] [--json]\n"
     "  A live view, every second: tasks by topic and state, completions and failures per\n"
     "  second, waiting fetches, the outbox, the store's fsync p50/p99 (from /metrics).\n"
     "  Several URLs (replicas on PostgreSQL) are shown as one cluster. --json: one object\n"
     "  per second, a line each.\n"},
    {"watch", cmd_watch, false,
     "berth watch [SUBJECT_PREFIX...] [--events URL] [--count N]\n"
     "  Prints events (task.parked.<topic>, task.completed.<topic>, ...) as they happen.\n"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: berth [--operate URL] [--events URL] [--admin URL] [--admin-key-file FILE]\n"
            "             [--json] [--timeout-ms MS]\n"
            "             [--tls-ca FILE] [--tls-server-name NAME] [--tls-insecure] COMMAND ...\n\n"
            "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %s", commands[i].usage);
    fprintf(f, "\nenvironment: BERTH_OPERATE, BERTH_EVENTS, BERTH_ADMIN, BERTH_ADMIN_KEY_FILE,\n"
               "BERTH_METRICS\n"
               "exit codes: 0 ok, 1 internal error, 2 usage, 3 refused by berthd (or a call\n"
               "ended refused or failed), 4 berthd unreachable, 5 an awaited call still waits\n");
}

/* ---- options ---- */

typedef enum opt_kind {
    OPT_STR,    /* --flag VALUE: a string */
    OPT_NUM,    /* --flag N: a uint64_t, and a bool that says it was given */
    OPT_FLAG,   /* --flag: a bool */
    OPT_LIST,   /* --flag VALUE, repeatable: a char *[MAX_LIST] and its int count */
    OPT_HEADER, /* --header NAME=VALUE */
} opt_kind;

typedef struct option {
    const char *flag;
    opt_kind kind;
    size_t field; /* offsetof the value in opts (OPT_LIST: the array) */
    size_t has;   /* OPT_NUM: offsetof its bool; OPT_LIST: of its count */
} option;

#define STR_OPT(flag, f)                                                                           \
    {                                                                                              \
        flag, OPT_STR, offsetof(opts, f), 0                                                        \
    }
#define NUM_OPT(flag, f, has)                                                                      \
    {                                                                                              \
        flag, OPT_NUM, offsetof(opts, f), offsetof(opts, has)                                      \
    }
#define FLAG_OPT(flag, f)                                                                          \
    {                                                                                              \
        flag, OPT_FLAG, offsetof(opts, f), 0                                                       \
    }
#define LIST_OPT(flag, f, n)                                                                       \
    {                                                                                              \
        flag, OPT_LIST, offsetof(opts, f), offsetof(opts, n)                                       \
    }

static const option options[] = {
    STR_OPT("--operate", operate),
    STR_OPT("--admin", admin),
    STR_OPT("--metrics", metrics),
    STR_OPT("--admin-key-file", admin_key_file),
    STR_OPT("--after", after),
    LIST_OPT("--channel", channels, nchannels),
    LIST_OPT("--complete", completes, ncompletes),
    STR_OPT("--topic", topic),
    STR_OPT("--state", state),
    NUM_OPT("--retries", retries, has_retries),
    NUM_OPT("--limit", limit, has_limit),
    STR_OPT("--events", events),
    STR_OPT("--worker", worker),
    STR_OPT("--token", token),
    STR_OPT("--content-type", content_type),
    STR_OPT("--key", key),
    STR_OPT("--delay", delay),
    STR_OPT("--at", at),
    NUM_OPT("--priority", priority, has_priority),
    STR_OPT("--result", result),
    STR_OPT("--code", code),
    STR_OPT("--message", message),
    STR_OPT("--details", details),
    STR_OPT("--tls-ca", tls_ca),
    STR_OPT("--tls-server-name", tls_server_name),
    NUM_OPT("--max", max, has_max),
    NUM_OPT("--lock-ms", lock_ms, has_lock),
    NUM_OPT("--wait-ms", wait_ms, has_wait),
    NUM_OPT("--retry-in-ms", retry_in_ms, has_retry_in),
    NUM_OPT("--retries-left", retries_left, has_retries_left),
    NUM_OPT("--count", count, has_count),
    NUM_OPT("--attempts", attempts, has_attempts),
    FLAG_OPT("--await", await),
    FLAG_OPT("--open", open_only),
    FLAG_OPT("--json", json),
    FLAG_OPT("--tls-insecure", tls_insecure),
    FLAG_OPT("--help", help),
    FLAG_OPT("-h", help),
    /* How long to wait for berthd; for a call, each attempt's timeout. */
    NUM_OPT("--timeout-ms", timeout_arg, has_timeout),
    {"--header", OPT_HEADER, 0, 0},
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

/* Sets option opt, given as a, from its value v (NULL: none left); *i
 * moves past v when it is taken. EX_OK or the usage error, told. */
static int set_option(opts *o, const option *opt, const char *a, char *v, int *i)
{
    char *at = (char *)o + opt->field;
    switch (opt->kind) {
    case OPT_FLAG:
        *(bool *)at = true;
        return EX_OK;
    case OPT_STR:
        if (v == NULL)
            break;
        *(const char **)at = v;
        (*i)++;
        return EX_OK;
    case OPT_NUM:
        if (!cli_parse_u64(v, (uint64_t *)at)) {
            fprintf(stderr, "berth: %s needs a number, got \"%s\"\n", a, v ? v : "");
            return EX_USAGE;
        }
        *(bool *)((char *)o + opt->has) = true;
        (*i)++;
        return EX_OK;
    case OPT_LIST: {
        int *n = (int *)((char *)o + opt->has);
        if (v == NULL)
            break;
        if (*n == MAX_LIST) {
            fprintf(stderr, "berth: too many %s\n", a);
            return EX_USAGE;
        }
        ((char **)at)[(*n)++] = v;
        (*i)++;
        return EX_OK;
    }
    case OPT_HEADER: {
        const char *eq = v ? strchr(v, '=') : NULL;
        if (eq == NULL || eq == v || o->nheaders == MAX_HEADERS) {
            fprintf(stderr, "berth: --header takes NAME=VALUE\n");
            return EX_USAGE;
        }
        o->hnames[o->nheaders] = strndup(v, (size_t)(eq - v));
        o->hvalues[o->nheaders++] = eq + 1;
        (*i)++;
        return EX_OK;
    }
    }
    fprintf(stderr, "berth: %s needs a value\n", a);
    return EX_USAGE;
}

/* A word that is not an option: the command, then its arguments. */
static int set_word(opts *o, const command **cmd, const char *a)
{
    if (*cmd == NULL) {
        for (size_t k = 0; k < N_COMMANDS; k++)
            if (strcmp(a, commands[k].name) == 0)
                *cmd = &commands[k];
        if (*cmd == NULL) {
            fprintf(stderr, "berth: unknown command \"%s\" (see berth --help)\n", a);
            return EX_USAGE;
        }
        return EX_OK;
    }
    if (o->npos == MAX_LIST) {
        fprintf(stderr, "berth: too many arguments\n");
        return EX_USAGE;
    }
    o->pos[o->npos++] = a;
    return EX_OK;
}

static int parse_args(int argc, char **argv, opts *o, const command **cmd)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const option *opt = NULL;
        for (size_t k = 0; k < N_OPTIONS && opt == NULL; k++)
            if (strcmp(a, options[k].flag) == 0)
                opt = &options[k];
        int ex;
        if (opt != NULL) {
            ex = set_option(o, opt, a, v, &i);
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "berth: unknown option %s (see berth --help)\n", a);
            ex = EX_USAGE;
        } else {
            ex = set_word(o, cmd, a);
        }
        if (ex != EX_OK)
            return ex;
    }
    return EX_OK;
}

/* The numbers that must fit their fields, and --timeout-ms, which is
 * berth's wait for berthd unless the command takes it as its own. */
static int check_numbers(opts *o, const command *cmd)
{
    if ((o->has_max && o->max > UINT32_MAX) ||
        (o->has_retries_left && o->retries_left > UINT32_MAX) ||
        (o->has_retries && o->retries > UINT32_MAX) || (o->has_limit && o->limit > UINT32_MAX)) {
        fprintf(stderr, "berth: --max, --limit, --retries and --retries-left take at most %u\n",
                UINT32_MAX);
        return EX_USAGE;
    }
    if (o->has_attempts && o->attempts > UINT32_MAX) {
        fprintf(stderr, "berth: --attempts takes at most %u\n", UINT32_MAX);
        return EX_USAGE;
    }
    if (o->has_timeout && (cmd == NULL || !cmd->attempt_timeout)) {
        if (o->timeout_arg == 0 || o->timeout_arg > 3600000) {
            fprintf(stderr, "berth: --timeout-ms takes 1 to 3600000\n");
            return EX_USAGE;
        }
        o->timeout_ms = (int)o->timeout_arg;
    }
    return EX_OK;
}

/* The URLs from the environment, or berthd's default ports here. */
static void set_defaults(opts *o)
{
    *o = (opts){
        .operate = getenv("BERTH_OPERATE"), .events = getenv("BERTH_EVENTS"), .timeout_ms = 10000};
    if (o->operate == NULL)
        o->operate = "tcp://127.0.0.1:7450";
    if (o->events == NULL)
        o->events = "tcp://127.0.0.1:7452";
    o->admin = getenv("BERTH_ADMIN") ? getenv("BERTH_ADMIN") : "tcp://127.0.0.1:7451";
    o->admin_key_file = getenv("BERTH_ADMIN_KEY_FILE");
    o->metrics = getenv("BERTH_METRICS") ? getenv("BERTH_METRICS") : "http://127.0.0.1:7453";
}

int main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return EX_INTERNAL;
    opts o;
    set_defaults(&o);
    const command *cmd = NULL;
    int ex = parse_args(argc, argv, &o, &cmd);
    if (ex == EX_OK)
        ex = check_numbers(&o, cmd);
    if (ex != EX_OK)
        return ex;
    if (cmd == NULL) {
        usage(o.help ? stdout : stderr);
        return o.help ? EX_OK : EX_USAGE;
    }
    if (o.help) {
        fputs(cmd->usage, stdout);
        return EX_OK;
    }
    return cmd->run(&o);
}
