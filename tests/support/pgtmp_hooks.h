/*
 * pgtmp_hooks.h — the runner's hooks that start and stop a test binary's
 * throwaway cluster (pgtmp.h). Include it in exactly one file of each
 * test binary of tests/pg/: Criterion names a hook by the line it stands
 * on, so the two are written out here rather than made by one macro.
 * Define PGTMP_DURABLE before including it for a cluster with fsync,
 * synchronous_commit and full_page_writes on (PGTMP_ENV_FSYNC, pgtmp.h).
 */
#ifndef BERTH_TESTS_PGTMP_HOOKS_H
#define BERTH_TESTS_PGTMP_HOOKS_H

#include <stdlib.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include "tests/support/pgtmp.h"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
#ifdef PGTMP_DURABLE
    setenv(PGTMP_ENV_FSYNC, "on", 1);
#endif
    pgtmp_runner_start();
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    pgtmp_runner_stop();
}

#endif
