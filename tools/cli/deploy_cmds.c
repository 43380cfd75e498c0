/*
 * deploy_cmds.c — berth admin deploy, retire and deployments: a new
 * version of a deployment's channels (the version before drains), the
 * retirement of one, and the list of them with what each still holds.
 * admin_cmds.c's table runs these; they send through cli_admin_run.
 */
#include <inttypes.h>
#include <string.h>

#include "tools/cli/cli.h"

static const char *deployment_state_name(Berth__V1__Deployment__State s)
{
    switch (s) {
    case BERTH__V1__DEPLOYMENT__STATE__LIVE:
        return "live";
    case BERTH__V1__DEPLOYMENT__STATE__DRAINING:
        return "draining";
    case BERTH__V1__DEPLOYMENT__STATE__RETIRED:
        return "retired";
    default:
        return "unknown";
    }
}

static void print_deployment_json(const Berth__V1__Deployment *d)
{
    printf("{\"id\":");
    cli_json_cstr(stdout, d->id);
    printf(",\"version\":%u,\"state\":\"%s\",\"created_at_ms\":%" PRIu64, d->version,
           deployment_state_name(d->state), d->created_at_ms);
    if (d->has_retired_at_ms)
        printf(",\"retired_at_ms\":%" PRIu64, d->retired_at_ms);
    printf(",\"pending_deliveries\":%" PRIu64 ",\"tasks\":%" PRIu64
           ",\"calls_backing_off\":%" PRIu64 ",\"terminal_tasks\":%" PRIu64
           ",\"poisoned_deliveries\":%" PRIu64 ",\"calls_retrying\":%" PRIu64 ",\"channels\":[",
           d->pending_deliveries, d->tasks, d->calls_backing_off, d->terminal_tasks,
           d->poisoned_deliveries, d->calls_retrying);
    for (size_t i = 0; i < d->n_channels; i++) {
        const Berth__V1__ChannelDecl *c = d->channels[i];
        printf("%s{\"name\":", i ? "," : "");
        cli_json_cstr(stdout, c->name);
        printf(",\"transport\":");
        cli_json_cstr(stdout, c->transport);
        if (c->has_reply_max_bytes)
            printf(",\"reply_max_bytes\":%" PRIu64, c->reply_max_bytes);
        printf(",\"content_types\":[");
        for (size_t k = 0; k < c->n_content_types; k++) {
            printf("%s", k ? "," : "");
            cli_json_cstr(stdout, c->content_types[k]);
        }
        printf("]}");
    }
    printf("]}");
}

static void print_deployment_row(const Berth__V1__Deployment *d)
{
    printf("%-20s %7u %-9s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64
           " %8" PRIu64 "  ",
           d->id ? d->id : "", d->version, deployment_state_name(d->state), d->pending_deliveries,
           d->tasks, d->calls_backing_off, d->calls_retrying, d->terminal_tasks,
           d->poisoned_deliveries);
    for (size_t i = 0; i < d->n_channels; i++)
        printf("%s%s(%s)", i ? "," : "", d->channels[i]->name ? d->channels[i]->name : "",
               d->channels[i]->transport ? d->channels[i]->transport : "pull");
    putchar('\n');
}

/* A deploy's or a retire's answer: the version it concerns. */
static int print_deployment_answer(const opts *o, const Berth__V1__Deployment *dep,
                                   const char *verb)
{
    if (o->json) {
        printf("{\"deployment\":");
        if (dep)
            print_deployment_json(dep);
        else
            printf("null");
        printf("}\n");
        return EX_OK;
    }
    if (dep == NULL)
        return EX_OK;
    printf("%s%s version %u: %s", verb, dep->id, dep->version, deployment_state_name(dep->state));
    if (dep->state == BERTH__V1__DEPLOYMENT__STATE__DRAINING)
        printf(" (holds %" PRIu64 " deliveries, %" PRIu64 " tasks, %" PRIu64
               " calls with an attempt left; it retires when all are done)",
               dep->pending_deliveries, dep->tasks, dep->calls_retrying);
    putchar('\n');
    return EX_OK;
}

/* ---- deploy ---- */

/* One --channel of a deploy: NAME[,transport=T][,reply-max-bytes=N]
 * [,content-types=A|B]; the strings stay in spec (cut in place). */
static bool parse_channel(char *spec, Berth__V1__ChannelDecl *c, char **types, size_t max_types)
{
    berth__v1__channel_decl__init(c);
    c->content_types = types;
    char *save = NULL;
    for (char *part = strtok_r(spec, ",", &save); part != NULL; part = strtok_r(NULL, ",", &save)) {
        if (c->name == NULL) {
            c->name = part;
        } else if (strncmp(part, "transport=", 10) == 0) {
            c->transport = part + 10;
        } else if (strncmp(part, "reply-max-bytes=", 16) == 0) {
            if (!cli_parse_u64(part + 16, &c->reply_max_bytes))
                return false;
            c->has_reply_max_bytes = 1;
        } else if (strncmp(part, "content-types=", 14) == 0) {
            char *tsave = NULL;
            for (char *t = strtok_r(part + 14, "|", &tsave); t != NULL;
                 t = strtok_r(NULL, "|", &tsave)) {
                if (c->n_content_types == max_types)
                    return false;
                types[c->n_content_types++] = t;
            }
        } else {
            return false;
        }
    }
    return c->name != NULL;
}

static int show_deployed(const opts *o, const Berth__V1__AdminResponse *r)
{
    return print_deployment_answer(o, r->deploy ? r->deploy->deployment : NULL, "deployed ");
}

int cmd_admin_deploy(opts *o)
{
    enum { TYPES_MAX = 64 };
    if (o->npos != 2 || o->nchannels == 0) {
        fprintf(stderr, "berth admin deploy: ID --channel "
                        "NAME[,transport=pull][,reply-max-bytes=N][,content-types=A|B] ...\n");
        return EX_USAGE;
    }
    /* Static: 256 channels of 512 bytes are too much for the stack. */
    static char specs[MAX_LIST][512];
    static char *types[MAX_LIST][TYPES_MAX];
    static Berth__V1__ChannelDecl decls[MAX_LIST];
    Berth__V1__ChannelDecl *ptrs[MAX_LIST];
    for (int i = 0; i < o->nchannels; i++) {
        snprintf(specs[i], sizeof(specs[i]), "%s", o->channels[i]);
        if (strlen(o->channels[i]) >= sizeof(specs[i]) ||
            !parse_channel(specs[i], &decls[i], types[i], TYPES_MAX)) {
            fprintf(stderr,
                    "berth admin deploy: --channel \"%s\" is not "
                    "NAME[,transport=T][,reply-max-bytes=N][,content-types=A|B]\n",
                    o->channels[i]);
            return EX_USAGE;
        }
        ptrs[i] = &decls[i];
    }
    Berth__V1__DeployRequest d = BERTH__V1__DEPLOY_REQUEST__INIT;
    d.id = (char *)o->pos[1];
    d.n_channels = (size_t)o->nchannels;
    d.channels = ptrs;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_DEPLOY;
    req.deploy = &d;
    return cli_admin_run(o, &req, 0, show_deployed, NULL);
}

/* ---- retire, deployments ---- */

static int show_retired(const opts *o, const Berth__V1__AdminResponse *r)
{
    return print_deployment_answer(o, r->retire ? r->retire->deployment : NULL, "");
}

int cmd_admin_retire(opts *o)
{
    const char *id = cli_admin_id(o);
    if (id == NULL)
        return EX_USAGE;
    Berth__V1__RetireRequest rt = BERTH__V1__RETIRE_REQUEST__INIT;
    rt.id = (char *)id;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_RETIRE;
    req.retire = &rt;
    return cli_admin_run(o, &req, 0, show_retired, NULL);
}

static int show_deployments(const opts *o, const Berth__V1__AdminResponse *r)
{
    const Berth__V1__ListDeploymentsResponse *ld = r->list_deployments;
    size_t n = ld ? ld->n_deployments : 0;
    if (o->json) {
        printf("{\"deployments\":[");
        for (size_t i = 0; i < n; i++) {
            printf("%s", i ? "," : "");
            print_deployment_json(ld->deployments[i]);
        }
        printf("]}\n");
        return EX_OK;
    }
    printf("%-20s %7s %-9s %8s %8s %8s %8s %8s %8s  %s\n", "DEPLOYMENT", "VERSION", "STATE",
           "PENDING", "TASKS", "BACKOFF", "RETRYING", "TERMINAL", "POISONED", "CHANNELS");
    for (size_t i = 0; i < n; i++)
        print_deployment_row(ld->deployments[i]);
    if (n == 0)
        printf("(none: every topic is a pull channel of the implicit deployment)\n");
    return EX_OK;
}

int cmd_admin_deployments(opts *o)
{
    Berth__V1__ListDeploymentsRequest l = BERTH__V1__LIST_DEPLOYMENTS_REQUEST__INIT;
    Berth__V1__AdminRequest req = BERTH__V1__ADMIN_REQUEST__INIT;
    req.method_case = BERTH__V1__ADMIN_REQUEST__METHOD_LIST_DEPLOYMENTS;
    req.list_deployments = &l;
    return cli_admin_run(o, &req, 0, show_deployments, NULL);
}
