/* The berth CLI against a running berthd: output and exit codes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"

static daemon_proc D;

static void setup(void)
{
    d_start(&D, NULL);
}

static void teardown(void)
{
    d_cleanup(&D);
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 60);

/* Runs "berth --operate URL ARGS"; returns its exit code, stdout in out. */
static int run(char *out, size_t len, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s --operate %s --events %s %s 2>/dev/null", BERTH_CLI_PATH,
             D.operate, D.events, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

DTest(cli, submit_fetch_complete_with_exit_codes)
{
    char out[4096], id[64], tok[64];
    cr_assert_eq(run(out, sizeof(out), "submit jobs hello"), 0);
    cr_assert_eq(strlen(out), 33, "one id and a newline: %s", out);
    cr_assert_eq(run(out, sizeof(out), "fetch jobs --worker w --wait-ms 0"), 0);
    cr_assert_eq(sscanf(out, "%63s\t%63s", id, tok), 2, "tab-separated task line: %s", out);
    cr_assert(strstr(out, "\tjobs\t1\thello") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "complete %s --worker w --token %s", id, tok), 0);
    cr_assert_eq(run(out, sizeof(out), "complete %s --worker w --token %s", id, tok), 3,
                 "a refusal exits 3");
}

DTest(cli, json_output_and_refusals)
{
    char out[4096];
    cr_assert_eq(run(out, sizeof(out), "--json submit jobs x --key k"), 0);
    cr_assert(strstr(out, "\"duplicate\":false") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--json submit jobs x --key k"), 0);
    cr_assert(strstr(out, "\"duplicate\":true") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--json fetch jobs --worker w --max 5000"), 3);
    cr_assert(strstr(out, "\"field\":\"max_tasks\"") != NULL, "%s", out);
    cr_assert(strstr(out, "\"limit\":1000") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--json fetch jobs --worker w --wait-ms 0"), 0);
    cr_assert(strstr(out, "\"payload\":\"x\"") != NULL, "%s", out);
}

DTest(cli, usage_and_unreachable_have_their_own_codes)
{
    char out[4096];
    cr_assert_eq(run(out, sizeof(out), "frobnicate"), 2);
    cr_assert_eq(run(out, sizeof(out), "fetch jobs"), 2, "--worker is required");
    cr_assert_eq(run(out, sizeof(out), "fetch --help"), 0);
    cr_assert(strstr(out, "--worker") != NULL);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --operate tcp://127.0.0.1:1 submit t x 2>/dev/null",
             BERTH_CLI_PATH);
    int status = system(cmd);
    cr_assert_eq(WEXITSTATUS(status), 4, "an unreachable daemon exits 4");
}

DTest(cli, watch_prints_events)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --events %s watch task.parked. --count 1 --json", BERTH_CLI_PATH,
             D.events);
    FILE *p = popen(cmd, "r");
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    char out[1024];
    cr_assert_eq(run(out, sizeof(out), "submit watched x"), 0);
    char line[1024] = "";
    cr_assert_not_null(fgets(line, sizeof(line), p));
    pclose(p);
    cr_assert(strstr(line, "\"subject\":\"task.parked.watched\"") != NULL, "%s", line);
}

DTest(cli, call_and_await_with_their_exit_codes)
{
    char out[4096], id[64], task[64], tok[64];
    cr_assert_eq(run(out, sizeof(out), "call sums 2+2"), 0);
    cr_assert_eq(sscanf(out, "%63s", id), 1);
    cr_assert_eq(strlen(id), 32, "an instance id: %s", out);
    cr_assert_eq(run(out, sizeof(out), "await %s --wait-ms 0", id), 5, "still waiting exits 5");
    cr_assert_eq(run(out, sizeof(out), "--json await %s --wait-ms 0", id), 5);
    cr_assert(strstr(out, "\"state\":\"WAITING\"") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--json fetch sums --worker w --wait-ms 0"), 0);
    cr_assert(strstr(out, id) != NULL, "the task names its call: %s", out);
    cr_assert_eq(run(out, sizeof(out), "fetch sums --worker w --wait-ms 0"), 0);
    cr_assert_str_eq(out, "", "the task is held");
    cr_assert_eq(run(out, sizeof(out), "--json call sums 3+3"), 0);
    char id2[64];
    cr_assert_eq(sscanf(strstr(out, "\"instance_id\":\"") + 15, "%32s", id2), 1, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "fetch sums --worker w --wait-ms 0"), 0);
    cr_assert_eq(sscanf(out, "%63s\t%63s", task, tok), 2, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "complete %s --worker w --token %s --result 6", task, tok),
                 0);
    cr_assert_eq(run(out, sizeof(out), "await %s", id2), 0, "resolved with a result exits 0");
    cr_assert_str_eq(out, "6");
    cr_assert_eq(run(out, sizeof(out), "--json await %s", id2), 0);
    cr_assert(strstr(out, "\"state\":\"RESOLVED\"") != NULL, "%s", out);
    cr_assert(strstr(out, "\"payload\":\"6\"") != NULL, "%s", out);

    /* Nobody answers: each attempt times out, then the call fails: exit 3. */
    cr_assert_eq(run(out, sizeof(out),
                     "--json call idle x --timeout-ms 100 --attempts 2 --await "
                     "--wait-ms 20000"),
                 3);
    cr_assert(strstr(out, "\"state\":\"FAILED\"") != NULL, "%s", out);
    cr_assert(strstr(out, "\"code\":\"TIMEOUT\"") != NULL, "%s", out);
    cr_assert(strstr(out, "\"attempt\":2") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--json call idle x --timeout-ms 0"), 3);
    cr_assert(strstr(out, "\"field\":\"retry.timeout_ms\"") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "call idle x --attempts 3"), 2,
                 "--attempts needs a timeout");
    cr_assert_eq(run(out, sizeof(out), "await nope"), 3);
}

DTest(cli, deploy_list_and_retire_deployments)
{
    char out[4096];
    cr_assert_eq(run(out, sizeof(out),
                     "--admin %s --json admin deploy web --channel pages,reply-max-bytes=100 "
                     "--channel 'images,content-types=image/png|image/jpeg'",
                     D.admin),
                 0, "%s", out);
    cr_assert(strstr(out, "\"id\":\"web\",\"version\":1,\"state\":\"live\"") != NULL, "%s", out);
    cr_assert(strstr(out, "\"content_types\":[\"image/png\",\"image/jpeg\"]") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "submit pages hello"), 0);
    cr_assert_eq(run(out, sizeof(out), "--admin %s admin deployments", D.admin), 0);
    cr_assert(strstr(out, "DEPLOYMENT") != NULL && strstr(out, "web") != NULL &&
                  strstr(out, "pages(pull)") != NULL,
              "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--admin %s admin retire web", D.admin), 0);
    cr_assert(strstr(out, "draining") != NULL, "it holds the task: %s", out);
    cr_assert_eq(run(out, sizeof(out), "submit pages again"), 3, "a draining channel refuses");
    cr_assert_eq(run(out, sizeof(out), "--admin %s admin deploy web", D.admin), 2,
                 "a deploy needs its channels");
    cr_assert_eq(
        run(out, sizeof(out), "--admin %s admin deploy web --channel 'a,colour=red'", D.admin), 2);
}
