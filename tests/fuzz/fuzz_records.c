/*
 * fuzz_records.c — libFuzzer: the store's record codecs given whatever a
 * corrupted value holds. Each either decodes or says BERTH_ECORRUPT;
 * what decodes encodes again, and a Body read in place (store_body_peek)
 * reads as the decoder reads it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/err.h"
#include "store/records.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    store_buf buf = {0};
    store_body b;
    store_body_meta m;
    int rp = store_body_peek(data, size, &m);
    int rb = store_body_decode(data, size, &b);
    /* A Body read in place reads as the decoder reads it. */
    if (rp != rb && rb != BERTH_ENOMEM)
        abort();
    if (rb == BERTH_OK) {
        if (m.topic_len != strlen(b.topic) || memcmp(m.topic, b.topic, m.topic_len) != 0 ||
            memcmp(m.id, b.id, BERTH_ID_LEN) != 0 || m.has_instance != b.has_instance ||
            (m.has_instance && memcmp(m.instance_id, b.instance_id, BERTH_ID_LEN) != 0) ||
            m.seq != b.seq || m.created_at_ms != b.created_at_ms || m.deployment != b.deployment ||
            m.priority != b.priority || m.not_before_ms != b.not_before_ms)
            abort();
        (void)store_body_encode(&b, &buf);
        store_body_clear(&b);
    }
    store_task_state t;
    if (store_task_state_decode(data, size, &t) == BERTH_OK) {
        (void)store_task_state_encode(&t, &buf);
        store_task_state_clear(&t);
    }
    store_delivery_state d;
    if (store_delivery_state_decode(data, size, &d) == BERTH_OK) {
        (void)store_delivery_state_encode(&d, &buf);
        store_delivery_state_clear(&d);
    }
    store_incident i;
    if (store_incident_decode(data, size, &i) == BERTH_OK) {
        (void)store_incident_encode(&i, &buf);
        store_incident_clear(&i);
    }
    store_instance n;
    if (store_instance_decode(data, size, &n) == BERTH_OK) {
        (void)store_instance_encode(&n, &buf);
        store_instance_clear(&n);
    }
    store_deployment dep;
    if (store_deployment_decode(data, size, &dep) == BERTH_OK) {
        (void)store_deployment_encode(&dep, &buf);
        store_deployment_clear(&dep);
    }
    store_buf_fini(&buf);
    return 0;
}
