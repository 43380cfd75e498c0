/* Record codecs of store/records.h: what is encoded decodes the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "store/err.h"
#include "store/records.h"

Test(store_records, body_round_trips_with_headers_and_binary_payload)
{
    const uint8_t payload[] = {0, 1, 2, 0, 255};
    store_header hs[] = {{"a", "1"}, {"trace", "xyz"}};
    store_body in = {.topic = "orders.archive",
                     .payload = payload,
                     .payload_len = sizeof(payload),
                     .headers = hs,
                     .n_headers = 2,
                     .content_type = "application/octet-stream",
                     .seq = 77,
                     .created_at_ms = 1234567};
    memset(in.id, 0x5A, BERTH_ID_LEN);
    store_buf buf = {0};
    cr_assert_eq(store_body_encode(&in, &buf), BERTH_OK);
    store_body out;
    cr_assert_eq(store_body_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_str_eq(out.topic, "orders.archive");
    cr_assert_eq(out.payload_len, sizeof(payload));
    cr_assert_arr_eq(out.payload, payload, sizeof(payload));
    cr_assert_eq(out.n_headers, 2);
    cr_assert_str_eq(out.headers[1].name, "trace");
    cr_assert_str_eq(out.headers[1].value, "xyz");
    cr_assert_str_eq(out.content_type, "application/octet-stream");
    cr_assert_not(out.has_instance);
    cr_assert_eq(out.seq, 77);
    cr_assert_eq(out.id[0], 0x5A);
    cr_assert_eq(out.id[15], 0x5A);
    cr_assert_eq(out.created_at_ms, 1234567);
    store_body_clear(&out);
    store_buf_fini(&buf);
}

Test(store_records, body_with_many_headers_and_an_instance)
{
    store_header hs[20];
    char names[20][8];
    for (int i = 0; i < 20; i++) {
        snprintf(names[i], sizeof(names[i]), "h%d", i);
        hs[i] = (store_header){names[i], "v"};
    }
    store_body in = {
        .topic = "t", .headers = hs, .n_headers = 20, .has_instance = true, .call_attempt = 3};
    memset(in.instance_id, 0xAB, BERTH_ID_LEN);
    store_buf buf = {0};
    cr_assert_eq(store_body_encode(&in, &buf), BERTH_OK);
    store_body out;
    cr_assert_eq(store_body_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_eq(out.n_headers, 20);
    cr_assert_str_eq(out.headers[19].name, "h19");
    cr_assert(out.has_instance);
    cr_assert_eq(out.instance_id[15], 0xAB);
    cr_assert_eq(out.call_attempt, 3);
    cr_assert_null(out.content_type);
    store_body_clear(&out);
    store_buf_fini(&buf);
}

Test(store_records, a_body_keeps_its_priority_and_delay_and_an_old_one_has_the_defaults)
{
    store_body in = {.topic = "t", .priority = 0, .not_before_ms = 1798135200000ull};
    memset(in.id, 1, BERTH_ID_LEN);
    store_buf buf = {0};
    cr_assert_eq(store_body_encode(&in, &buf), BERTH_OK);
    store_body out;
    cr_assert_eq(store_body_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_eq(out.priority, 0, "0 is a priority, not an absence");
    cr_assert_eq(out.not_before_ms, 1798135200000ull);
    store_body_clear(&out);
    /* A row written before priorities (or at 1024) carries neither field. */
    in.priority = STORE_PRIORITY_ABSENT;
    in.not_before_ms = 0;
    size_t without;
    cr_assert_eq(store_body_encode(&in, &buf), BERTH_OK);
    without = buf.len;
    cr_assert_eq(store_body_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_eq(out.priority, 1024);
    cr_assert_eq(out.not_before_ms, 0);
    store_body_clear(&out);
    in.priority = 7;
    cr_assert_eq(store_body_encode(&in, &buf), BERTH_OK);
    cr_assert_gt(buf.len, without, "a priority other than 1024 is written");
    store_buf_fini(&buf);
}

Test(store_records, task_state_round_trips)
{
    store_task_state in = {.available_at_ms = 5,
                           .worker_id = "w-1",
                           .has_lock_token = true,
                           .lock_expires_at_ms = 99,
                           .claims = 4,
                           .retries_left = 2,
                           .failures = 1,
                           .terminal = true,
                           .last_error = {"E_DB", "db down", "{\"x\":1}"}};
    memset(in.lock_token, 7, BERTH_ID_LEN);
    store_buf buf = {0};
    cr_assert_eq(store_task_state_encode(&in, &buf), BERTH_OK);
    store_task_state out;
    cr_assert_eq(store_task_state_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_eq(out.available_at_ms, 5);
    cr_assert_str_eq(out.worker_id, "w-1");
    cr_assert(out.has_lock_token);
    cr_assert_eq(out.lock_token[0], 7);
    cr_assert_eq(out.lock_expires_at_ms, 99);
    cr_assert_eq(out.claims, 4);
    cr_assert_eq(out.retries_left, 2);
    cr_assert_eq(out.failures, 1);
    cr_assert(out.terminal);
    cr_assert_str_eq(out.last_error.code, "E_DB");
    cr_assert_str_eq(out.last_error.details, "{\"x\":1}");
    store_task_state_clear(&out);
    store_buf_fini(&buf);
}

Test(store_records, delivery_state_and_incident_round_trip)
{
    store_delivery_state d = {.attempts = 3,
                              .next_attempt_at_ms = 42,
                              .poisoned = true,
                              .last_error = {.message = "park failed"}};
    store_buf buf = {0};
    cr_assert_eq(store_delivery_state_encode(&d, &buf), BERTH_OK);
    store_delivery_state dout;
    cr_assert_eq(store_delivery_state_decode(buf.data, buf.len, &dout), BERTH_OK);
    cr_assert_eq(dout.attempts, 3);
    cr_assert_eq(dout.next_attempt_at_ms, 42);
    cr_assert(dout.poisoned);
    cr_assert_str_eq(dout.last_error.message, "park failed");
    cr_assert_null(dout.last_error.code);
    store_delivery_state_clear(&dout);

    store_incident in = {
        .kind = STORE_INCIDENT_TASK_TERMINAL, .topic = "t", .error = {.code = "X"}, .at_ms = 9};
    memset(in.subject_id, 1, BERTH_ID_LEN);
    cr_assert_eq(store_incident_encode(&in, &buf), BERTH_OK);
    store_incident iout;
    cr_assert_eq(store_incident_decode(buf.data, buf.len, &iout), BERTH_OK);
    cr_assert_eq(iout.kind, STORE_INCIDENT_TASK_TERMINAL);
    cr_assert_eq(iout.subject_id[3], 1);
    cr_assert_str_eq(iout.error.code, "X");
    cr_assert_eq(iout.at_ms, 9);
    store_incident_clear(&iout);
    store_buf_fini(&buf);
}

Test(store_records, instance_round_trips_live_and_ended)
{
    const char *codes[] = {"BAD_INPUT", "GONE"};
    const uint8_t request[] = {1, 2, 3}, key[] = {0xff, 1, 't', 'k'};
    store_instance in = {.state = STORE_INSTANCE_BACKOFF,
                         .topic = "calls",
                         .attempt = 2,
                         .created_at_ms = 1000,
                         .timer_at_ms = 5000,
                         .has_current = true,
                         .has_retry = true,
                         .timeout_ms = 250,
                         .max_attempts = 4,
                         .initial_backoff_ms = 100,
                         .max_backoff_ms = 900,
                         .multiplier = 1.5,
                         .non_retryable_codes = codes,
                         .n_non_retryable_codes = 2,
                         .request = request,
                         .request_len = sizeof(request),
                         .dedup_key = key,
                         .dedup_key_len = sizeof(key)};
    memset(in.id, 0x11, BERTH_ID_LEN);
    memset(in.current_id, 0x22, BERTH_ID_LEN);
    store_buf buf = {0};
    cr_assert_eq(store_instance_encode(&in, &buf), BERTH_OK);
    store_instance out;
    cr_assert_eq(store_instance_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_eq(out.state, STORE_INSTANCE_BACKOFF);
    cr_assert_str_eq(out.topic, "calls");
    cr_assert_eq(out.attempt, 2);
    cr_assert_eq(out.timer_at_ms, 5000);
    cr_assert(out.has_current);
    cr_assert_arr_eq(out.current_id, in.current_id, BERTH_ID_LEN);
    cr_assert(out.has_retry);
    cr_assert_eq(out.timeout_ms, 250);
    cr_assert_eq(out.max_attempts, 4);
    cr_assert_eq(out.multiplier, 1.5);
    cr_assert_eq(out.n_non_retryable_codes, 2);
    cr_assert_str_eq(out.non_retryable_codes[1], "GONE");
    cr_assert_eq(out.request_len, sizeof(request));
    cr_assert_arr_eq(out.dedup_key, key, sizeof(key));
    cr_assert_not(out.has_result);
    store_instance_clear(&out);

    store_header hs[] = {{"h", "v"}};
    store_instance end = {.state = STORE_INSTANCE_RESOLVED,
                          .topic = "calls",
                          .attempt = 1,
                          .ended_at_ms = 9000,
                          .has_result = true,
                          .result_payload = (const uint8_t *)"ok",
                          .result_payload_len = 2,
                          .result_content_type = "text/plain",
                          .result_headers = hs,
                          .n_result_headers = 1};
    memset(end.id, 0x33, BERTH_ID_LEN);
    cr_assert_eq(store_instance_encode(&end, &buf), BERTH_OK);
    cr_assert_eq(store_instance_decode(buf.data, buf.len, &out), BERTH_OK);
    cr_assert_eq(out.ended_at_ms, 9000);
    cr_assert(out.has_result);
    cr_assert_eq(out.result_payload_len, 2);
    cr_assert_str_eq(out.result_headers[0].value, "v");
    cr_assert_eq(out.timer_at_ms, 0);
    cr_assert_null(out.request);
    store_instance_clear(&out);
    /* A record without an id or a known state is not an instance. */
    end.state = 9;
    cr_assert_eq(store_instance_encode(&end, &buf), BERTH_OK);
    cr_assert_eq(store_instance_decode(buf.data, buf.len, &out), BERTH_ECORRUPT);
    store_buf_fini(&buf);
}

Test(store_records, garbage_is_corrupt_not_a_crash)
{
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    store_body b;
    cr_assert_eq(store_body_decode(junk, sizeof(junk), &b), BERTH_ECORRUPT);
    store_task_state s;
    cr_assert_eq(store_task_state_decode(junk, sizeof(junk), &s), BERTH_ECORRUPT);
    /* A well-formed message without a topic is not a body either. */
    cr_assert_eq(store_body_decode("", 0, &b), BERTH_ECORRUPT);
    store_body_clear(&b); /* no-op on a failed decode */
}

Test(store_records, deployment_round_trips_and_a_body_names_its_deployment)
{
    const char *types[] = {"application/json", "text/plain"};
    store_channel cs[] = {
        {.name = "orders",
         .transport = "pull",
         .reply_max_bytes = 4096,
         .content_types = types,
         .n_content_types = 2},
        {.name = "refunds"},
    };
    store_deployment d = {.id = "shop",
                          .version = 3,
                          .state = STORE_DEPLOYMENT_DRAINING,
                          .channels = cs,
                          .n_channels = 2,
                          .created_at_ms = 1700000000123ull};
    store_buf buf = {0};
    cr_assert_eq(store_deployment_encode(&d, &buf), BERTH_OK);
    store_deployment got;
    cr_assert_eq(store_deployment_decode(buf.data, buf.len, &got), BERTH_OK);
    cr_assert_str_eq(got.id, "shop");
    cr_assert_eq(got.version, 3);
    cr_assert_eq(got.state, STORE_DEPLOYMENT_DRAINING);
    cr_assert_eq(got.n_channels, 2);
    cr_assert_str_eq(got.channels[0].name, "orders");
    cr_assert_str_eq(got.channels[0].transport, "pull");
    cr_assert_eq(got.channels[0].reply_max_bytes, 4096);
    cr_assert_eq(got.channels[0].n_content_types, 2);
    cr_assert_str_eq(got.channels[0].content_types[1], "text/plain");
    cr_assert_null(got.channels[1].transport);
    cr_assert_eq(got.created_at_ms, 1700000000123ull);
    cr_assert_eq(got.retired_at_ms, 0);
    store_deployment_clear(&got);

    store_body b = {.topic = "orders",
                    .payload = (const uint8_t *)"x",
                    .payload_len = 1,
                    .seq = 7,
                    .deployment = 42};
    cr_assert_eq(store_body_encode(&b, &buf), BERTH_OK);
    store_body bg;
    cr_assert_eq(store_body_decode(buf.data, buf.len, &bg), BERTH_OK);
    cr_assert_eq(bg.deployment, 42);
    store_body_clear(&bg);
    b.deployment = 0; /* the implicit deployment: absent on disk, 0 read back */
    cr_assert_eq(store_body_encode(&b, &buf), BERTH_OK);
    cr_assert_eq(store_body_decode(buf.data, buf.len, &bg), BERTH_OK);
    cr_assert_eq(bg.deployment, 0);
    store_body_clear(&bg);
    /* A deployment without a version is corrupt. */
    cr_assert_eq(store_deployment_decode("", 0, &got), BERTH_ECORRUPT);
    store_buf_fini(&buf);
}

/* store_body_peek() reads what store_body_decode() reads: the same
 * verdict, and when both take a value, the same fields. */
static void peek_agrees(const uint8_t *buf, size_t len, const char *what)
{
    store_body full;
    store_body_meta m;
    int rf = store_body_decode(buf, len, &full), rp = store_body_peek(buf, len, &m);
    cr_assert_eq(rp, rf, "%s: peek %d, decode %d", what, rp, rf);
    if (rf != BERTH_OK)
        return;
    cr_assert_eq(m.topic_len, strlen(full.topic), "%s", what);
    cr_assert_eq(memcmp(m.topic, full.topic, m.topic_len), 0, "%s", what);
    cr_assert_arr_eq(m.id, full.id, BERTH_ID_LEN, "%s", what);
    cr_assert_eq(m.has_instance, full.has_instance, "%s", what);
    if (m.has_instance)
        cr_assert_arr_eq(m.instance_id, full.instance_id, BERTH_ID_LEN, "%s", what);
    cr_assert_eq(m.seq, full.seq, "%s", what);
    cr_assert_eq(m.created_at_ms, full.created_at_ms, "%s", what);
    cr_assert_eq(m.deployment, full.deployment, "%s", what);
    cr_assert_eq(m.priority, full.priority, "%s", what);
    cr_assert_eq(m.not_before_ms, full.not_before_ms, "%s", what);
    store_body_clear(&full);
}

Test(store_records, a_body_read_in_place_agrees_with_the_decoder_whole_cut_and_flipped)
{
    const uint8_t payload[] = {9, 8, 7, 0, 6};
    store_header hs[] = {{"k", "v"}, {"trace", ""}};
    store_body bodies[3] = {
        {.topic = "a.b",
         .payload = payload,
         .payload_len = sizeof(payload),
         .seq = 1,
         .created_at_ms = 5,
         .priority = STORE_PRIORITY_ABSENT},
        {.topic = "calls",
         .headers = hs,
         .n_headers = 2,
         .content_type = "text/plain",
         .has_instance = true,
         .call_attempt = 3,
         .seq = UINT64_MAX - 1,
         .created_at_ms = 1780000000000ull,
         .deployment = 7,
         .priority = 0,
         .not_before_ms = 1780000009999ull},
        {.topic = "", .seq = 300, .priority = UINT32_MAX, .deployment = UINT32_MAX},
    };
    for (int i = 0; i < 3; i++) {
        memset(bodies[i].id, 0x30 + i, BERTH_ID_LEN);
        memset(bodies[i].instance_id, 0x70 + i, BERTH_ID_LEN);
        store_buf buf = {0};
        cr_assert_eq(store_body_encode(&bodies[i], &buf), BERTH_OK);
        char what[64];
        snprintf(what, sizeof(what), "body %d whole", i);
        peek_agrees(buf.data, buf.len, what);
        store_body_meta m;
        cr_assert_eq(store_body_peek(buf.data, buf.len, &m), BERTH_OK);
        for (size_t cut = 0; cut < buf.len; cut++) {
            snprintf(what, sizeof(what), "body %d cut at %zu", i, cut);
            peek_agrees(buf.data, cut, what);
        }
        uint8_t *flip = malloc(buf.len);
        for (size_t at = 0; at < buf.len; at++)
            for (int bit = 0; bit < 8; bit++) {
                memcpy(flip, buf.data, buf.len);
                flip[at] ^= (uint8_t)(1u << bit);
                snprintf(what, sizeof(what), "body %d, byte %zu bit %d flipped", i, at, bit);
                peek_agrees(flip, buf.len, what);
            }
        free(flip);
        store_buf_fini(&buf);
    }
}
