/* The berth CLI against a running berthd: output and exit codes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <criterion/criterion.h>

#include "tests/support/daemon.h"
#include "tools/clients/c/when.h"

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

DTest(cli, fetch_completes_what_it_names_in_the_same_round_trip)
{
    char out[4096], id[64], tok[64];
    cr_assert_eq(run(out, sizeof(out), "submit fu one"), 0);
    cr_assert_eq(run(out, sizeof(out), "submit fu two"), 0);
    cr_assert_eq(run(out, sizeof(out), "fetch fu --worker w --wait-ms 0 --max 1"), 0);
    cr_assert_eq(sscanf(out, "%63s\t%63s", id, tok), 2, "%s", out);
    cr_assert_eq(
        run(out, sizeof(out), "--json fetch fu --worker w --wait-ms 0 --complete %s:%s", id, tok),
        0);
    cr_assert(strstr(out, "\"complete_statuses\":[{\"code\":0,") != NULL, "%s", out);
    cr_assert(strstr(out, "\"payload\":\"two\"") != NULL, "%s", out);
    cr_assert_eq(
        run(out, sizeof(out), "--json fetch fu --worker w --wait-ms 0 --complete %s:%s", id, tok),
        0, "the fetch itself is fine");
    cr_assert(strstr(out, "\"verdict\":\"NOT_FOUND\"") != NULL, "completed already: %s", out);
    cr_assert_eq(run(out, sizeof(out), "fetch fu --worker w --complete nocolon"), 2);
}

DTest(cli, submit_later_and_first)
{
    char out[4096];
    cr_assert_eq(run(out, sizeof(out), "submit jobs late --delay 1h"), 0);
    cr_assert_eq(run(out, sizeof(out), "submit jobs normal"), 0);
    cr_assert_eq(run(out, sizeof(out), "submit jobs urgent --priority 1"), 0);
    cr_assert_eq(run(out, sizeof(out), "submit jobs past --at 2020-01-01T00:00:00Z --priority 2"),
                 0);
    cr_assert_eq(run(out, sizeof(out), "--json fetch jobs --worker w --wait-ms 0 --max 10"), 0);
    const char *u = strstr(out, "\"payload\":\"urgent\""), *p = strstr(out, "\"payload\":\"past\""),
               *n = strstr(out, "\"payload\":\"normal\"");
    cr_assert(u && p && n && u < p && p < n, "most urgent first: %s", out);
    cr_assert(strstr(out, "\"priority\":1,") != NULL, "%s", out);
    cr_assert(strstr(out, "\"payload\":\"late\"") == NULL, "an hour early: %s", out);
    cr_assert_eq(run(out, sizeof(out), "--admin %s --json admin tasks --state delayed", D.admin),
                 0);
    cr_assert(strstr(out, "\"state\":\"DELAYED\"") != NULL, "%s", out);
    cr_assert(strstr(out, "\"priority\":1024") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--admin %s --json stats", D.admin), 0);
    cr_assert(strstr(out, "\"delayed\":1,") != NULL, "%s", out);

    /* Refused by berthd (exit 3, the field named) or by the CLI (usage, 2). */
    cr_assert_eq(run(out, sizeof(out), "--json submit jobs x --delay 31d"), 3);
    cr_assert(strstr(out, "\"field\":\"delay_ms\"") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "--json submit jobs x --at 2999-01-01T00:00:00Z"), 3);
    cr_assert(strstr(out, "\"field\":\"not_before_ms\"") != NULL, "%s", out);
    cr_assert_eq(run(out, sizeof(out), "submit jobs x --delay 10"), 2, "a unit is required");
    cr_assert_eq(run(out, sizeof(out), "submit jobs x --at tomorrow"), 2);
    cr_assert_eq(run(out, sizeof(out), "submit jobs x --delay 1s --at 2030-01-01T00:00:00Z"), 2);
    cr_assert_eq(run(out, sizeof(out), "submit jobs x --priority 4294967296"), 2);
}

Test(when, durations)
{
    static const struct {
        const char *s;
        uint64_t ms;
    } ok[] = {{"0", 0},        {"1500ms", 1500}, {"10s", 10000},           {"10m", 600000},
              {"2h", 7200000}, {"1d", 86400000}, {"1h30m", 5400000},       {"1m1ms", 60001},
              {"0s", 0},       {"90m", 5400000}, {"1d2h3m4s5ms", 93784005}};
    char err[200];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        cr_assert(when_duration_ms(ok[i].s, &v, err, sizeof(err)), "%s: %s", ok[i].s, err);
        cr_assert_eq(v, ok[i].ms, "%s: %llu", ok[i].s, (unsigned long long)v);
    }
    static const char *const bad[] = {"",    "10",  "m",   "10x",   "-1s", "1.5s",
                                      "1h ", " 1h", "1hm", "10ms5", "s10", "99999999999999999999d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v;
        cr_assert_not(when_duration_ms(bad[i], &v, err, sizeof(err)), "\"%s\" taken", bad[i]);
        cr_assert_gt(strlen(err), 0);
    }
}

Test(when, instants)
{
    static const struct {
        const char *s;
        uint64_t ms;
    } ok[] = {
        {"1970-01-01T00:00:00Z", 0},
        {"2026-12-24T18:00:00Z", 1798135200000ull},
        {"2026-12-24T19:00:00+01:00", 1798135200000ull},
        {"2026-12-24T13:30:00-04:30", 1798135200000ull},
        {"2026-12-24t18:00:00.25z", 1798135200250ull},
        {"2026-12-24 18:00:00.123456Z", 1798135200123ull},
        {"2024-02-29T00:00:00Z", 1709164800000ull},
        {"2000-02-29T23:59:59Z", 951868799000ull},
    };
    char err[200];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        cr_assert(when_instant_ms(ok[i].s, &v, err, sizeof(err)), "%s: %s", ok[i].s, err);
        cr_assert_eq(v, ok[i].ms, "%s: %llu", ok[i].s, (unsigned long long)v);
    }
    static const char *const bad[] = {
        "2026-12-24T18:00:00",      "2026-12-24",           "2026-13-01T00:00:00Z",
        "2026-02-29T00:00:00Z",     "1900-02-29T00:00:00Z", "2026-12-24T24:00:00Z",
        "2026-12-24T18:60:00Z",     "2026-12-24T18:00:60Z", "2026-12-24T18:00:00.Z",
        "2026-12-24T18:00:00+1:00", "26-12-24T18:00:00Z",   "2026-12-24T18:00:00Zjunk",
        "1969-12-31T23:59:59Z",     "2026-04-31T00:00:00Z", "tomorrow",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v;
        cr_assert_not(when_instant_ms(bad[i], &v, err, sizeof(err)), "\"%s\" taken", bad[i]);
        cr_assert_gt(strlen(err), 0);
    }
}

/* berth top: one frame as JSON, then a list with a berthd that is not
 * there (named, skipped), then only such (exit 4) and a bad list (2). */
DTest(cli, top_shows_one_frame_as_json_and_names_what_it_cannot_reach)
{
    char out[4096];
    cr_assert_eq(run(out, sizeof(out), "submit topjobs one"), 0);
    cr_assert_eq(run(out, sizeof(out), "top --metrics %s --count 1 --json", D.metrics), 0);
    cr_assert(strstr(out, "{\"replicas\":1,\"reached\":1,\"unreachable\":[],\"topics\":[{\"topic\":"
                          "\"topjobs\",\"ready\":1,") != NULL,
              "%s", out);
    cr_assert(strstr(out, "\"completed_per_s\":null") != NULL, "no rate from one frame: %s", out);
    cr_assert_eq(
        run(out, sizeof(out), "top --metrics %s,http://127.0.0.1:9 --count 1 --json", D.metrics),
        0);
    cr_assert(
        strstr(out, "\"replicas\":2,\"reached\":1,\"unreachable\":[\"http://127.0.0.1:9\"]") !=
            NULL,
        "%s", out);
    cr_assert_eq(run(out, sizeof(out), "top --metrics http://127.0.0.1:9 --count 1"), 4);
    cr_assert_eq(run(out, sizeof(out), "top --metrics , --count 1"), 2);
}
