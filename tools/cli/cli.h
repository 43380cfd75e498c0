/*
 * cli.h — what the files of the berth command share: its exit codes, the
 * options one invocation parsed (opts), and the helpers more than one
 * command file calls, grouped by the file that defines them.
 *
 * berth.c parses the command line into an opts and runs the command its
 * table names; each command file (task_cmds.c, call_cmds.c, admin_cmds.c,
 * deploy_cmds.c, watch.c) runs its commands from that opts and returns
 * one of the exit codes below. Everything runs on the one thread.
 */
#ifndef BERTH_TOOLS_CLI_H
#define BERTH_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/clients/c/client.h"

/* Exit codes (stable: scripts test them; berth --help lists them). */
enum {
    EX_OK = 0,
    EX_INTERNAL = 1,
    EX_USAGE = 2,
    EX_REFUSED = 3,     /* berthd refused, or an awaited call ended refused or failed */
    EX_UNREACHABLE = 4, /* berthd is unreachable, or did not answer in time */
    EX_PENDING = 5      /* an awaited call has not ended yet */
};

#define MAX_HEADERS 64
#define MAX_LIST    256 /* positional arguments, --channel and --complete, each */

/* One invocation's options, as parsed; the strings point into argv (the
 * environment for the URLs), and outlive the command. */
typedef struct opts {
    const char *operate, *events, *admin, *admin_key_file, *metrics; /* URLs, a key file */
    bool json;
    int timeout_ms; /* how long to wait for berthd (--timeout-ms, but not a call's) */
    /* command arguments */
    const char *pos[MAX_LIST];
    int npos;
    const char *worker, *token, *content_type, *key, *result, *code, *message, *details;
    const char *delay, *at; /* a submit's or call's --delay DURATION, --at RFC3339 */
    bool has_priority;
    uint64_t priority;
    const char *tls_ca, *tls_server_name;
    bool tls_insecure;
    const char *hnames[MAX_HEADERS], *hvalues[MAX_HEADERS];
    int nheaders;
    bool has_max, has_lock, has_wait, has_retry_in, has_retries_left, has_count;
    uint64_t max, lock_ms, wait_ms, retry_in_ms, retries_left, count;
    bool help;
    /* call */
    bool has_timeout, has_attempts, await;
    uint64_t timeout_arg, attempts; /* --timeout-ms as given (ms), --attempts */
    /* admin */
    const char *after, *topic, *state;
    char *channels[MAX_LIST]; /* deploy: --channel, repeatable */
    int nchannels;
    char *completes[MAX_LIST]; /* fetch: --complete ID:TOKEN, repeatable (cut in place) */
    int ncompletes;
    bool has_retries, has_limit;
    bool open_only; /* incidents --open */
    uint64_t retries, limit;
} opts;

/* ---- the commands (berth.c's table runs them) ---- */

int cmd_submit(opts *o); /* task_cmds.c */
int cmd_fetch(opts *o);
int cmd_complete(opts *o);
int cmd_fail(opts *o);
int cmd_refuse(opts *o);
int cmd_extend(opts *o);
int cmd_release(opts *o);
int cmd_call(opts *o); /* call_cmds.c */
int cmd_await(opts *o);
int cmd_admin(opts *o); /* admin_cmds.c */
int cmd_stats(opts *o);
int cmd_top(opts *o);
int cmd_watch(opts *o); /* watch.c */
/* deploy_cmds.c: berth admin deploy, retire, deployments (cmd_admin runs them) */
int cmd_admin_deploy(opts *o);
int cmd_admin_retire(opts *o);
int cmd_admin_deployments(opts *o);

/* ---- args.c: reading arguments ---- */

/* A decimal number, digits only; false for anything else or an overflow. */
bool cli_parse_u64(const char *s, uint64_t *out);
/* The bytes of an argument, or all of stdin when it is "-"; NULL (and
 * *len 0) for NULL. The caller frees the copy. */
uint8_t *cli_read_arg(const char *arg, size_t *len);
/* The ID after an admin subcommand (berth admin SUB ID); NULL, with the
 * usage error told, when there is not exactly one. */
const char *cli_admin_id(const opts *o);
/* --delay, --at and --priority into a SubmitRequest or a CallRequest m
 * (the same fields); EX_OK or the usage error, printed. */
#define CLI_WHEN_INTO(o, m)                                                                        \
    cli_when_into(o, &(m)->has_delay_ms, &(m)->delay_ms, &(m)->has_not_before_ms,                  \
                  &(m)->not_before_ms, &(m)->has_priority, &(m)->priority)
int cli_when_into(const opts *o, protobuf_c_boolean *has_delay, uint64_t *delay,
                  protobuf_c_boolean *has_at, uint64_t *at, protobuf_c_boolean *has_priority,
                  uint32_t *priority);

/* ---- rpc.c: round trips to berthd ---- */

/* Sends req to the operate surface and waits timeout_ms (0: --timeout-ms).
 * EX_OK with the answer in *out (the caller frees it), or the exit code of
 * what went wrong, told (a refusal as cli_refused() prints it). */
int cli_call(const opts *o, Berth__V1__Request *req, int timeout_ms, Berth__V1__Response **out);
/* An admin answer's printer; returns the command's exit code. */
typedef int (*cli_admin_show)(const opts *o, const Berth__V1__AdminResponse *r);
/* Signs req with --admin-key-file (if one is named), sends it to the admin
 * surface and waits timeout_ms (0: --timeout-ms). On OK the answer goes to
 * show, or, when show is NULL, done is printed (cli_print_ok); either way
 * the answer is freed here. Returns the exit code. */
int cli_admin_run(const opts *o, Berth__V1__AdminRequest *req, int timeout_ms, cli_admin_show show,
                  const char *done);

/* ---- output.c: printing ---- */

void cli_json_str(FILE *f, const char *s, size_t n); /* a JSON string of n bytes */
void cli_json_cstr(FILE *f, const char *s);          /* ...of a C string; null for NULL */
/* Valid UTF-8 with no control bytes but tab and newline: printable as text. */
bool cli_is_text(const uint8_t *p, size_t n);
char *cli_base64(const uint8_t *p, size_t n); /* malloc'd; NULL when out of memory */
const char *cli_code_name(int code);          /* a Status code: "NOT_FOUND" */
const char *cli_verdict_name(int v);          /* a Status verdict: "LOCK_LOST" */
const char *cli_task_state_name(int s);       /* a TaskInfo state: "READY" */
const char *cli_instance_state_name(int s);   /* a call's state: "RESOLVED" */
void cli_print_status_json(FILE *f, const Berth__V1__Status *s);
/* Prints a refusal (stdout with --json, else stderr); returns EX_REFUSED. */
int cli_refused(const opts *o, const Berth__V1__Status *s);
/* A command done: what (a line) for people, {"ok":true,extra_json} for
 * scripts; returns EX_OK. */
int cli_print_ok(const opts *o, const char *what, const char *extra_json);
/* ,"NAME":"text" (when it is text) ,"NAME_base64":"..." to stdout. */
void cli_print_payload_json(const char *name, ProtobufCBinaryData p);
/* ,"NAME":{"code":...,"message":...,"details":...} to stdout; nothing for NULL. */
void cli_print_error_json(const char *name, const Berth__V1__Error *e);

#endif
