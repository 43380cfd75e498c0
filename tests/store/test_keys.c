/* Key layouts of store/keys.h, byte by byte. */
#include <string.h>

#include <criterion/criterion.h>

#include "store/err.h"
#include "store/keys.h"

Test(store_keys, be64_is_big_endian_and_round_trips)
{
    uint8_t b[8];
    store_put_be64(b, 0x0102030405060708ull);
    const uint8_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_arr_eq(b, want, 8);
    cr_assert_eq(store_get_be64(b), 0x0102030405060708ull);
    store_put_be32(b, 0xA0B0C0D0u);
    cr_assert_eq(b[0], 0xA0);
    cr_assert_eq(store_get_be32(b), 0xA0B0C0D0u);
}

Test(store_keys, be64_orders_like_the_numbers)
{
    uint8_t a[8], b[8];
    store_put_be64(a, 255);
    store_put_be64(b, 256);
    cr_assert_lt(memcmp(a, b, 8), 0, "big-endian keys must sort numerically");
}

Test(store_keys, row_key_is_sequence_then_kind)
{
    uint8_t k[STORE_ROW_KEY_LEN], later[STORE_ROW_KEY_LEN];
    store_row_key(k, 0x0102030405060708ull, STORE_KIND_STATE);
    const uint8_t want[] = {1, 2, 3, 4, 5, 6, 7, 8, 's'};
    cr_assert_arr_eq(k, want, sizeof(want));
    store_row_key(k, 7, STORE_KIND_BODY);
    cr_assert_eq(k[8], 'b');
    store_row_key(later, 7, STORE_KIND_STATE);
    cr_assert_lt(memcmp(k, later, sizeof(k)), 0, "a body row sorts right before its state row");
    store_row_key(later, 8, STORE_KIND_BODY);
    cr_assert_lt(memcmp(k, later, sizeof(k)), 0, "rows sort by sequence: new ones at the end");
    uint8_t d[STORE_DELIVERY_KEY_LEN];
    store_delivery_key(d, 7);
    cr_assert_eq(d[0], 'd');
    cr_assert_eq(store_get_be64(d + 1), 7);
}

Test(store_keys, submit_key_is_length_prefixed_topic_then_key)
{
    uint8_t k[STORE_SUBMIT_KEY_MAX];
    size_t n = store_submit_key(k, "ab", "xyz");
    cr_assert_eq(n, 6);
    cr_assert_eq(k[0], 2);
    cr_assert_eq(memcmp(k + 1, "abxyz", 5), 0);
    /* ("a","bc") and ("ab","c") must not collide. */
    uint8_t k2[STORE_SUBMIT_KEY_MAX];
    size_t n2 = store_submit_key(k2, "a", "bxyz");
    cr_assert(n2 != n || memcmp(k, k2, n) != 0);
    cr_assert_eq(store_submit_key(k, "", "x"), 0);
    cr_assert_eq(store_submit_key(k, "t", ""), 0);
}

Test(store_keys, ids_print_as_32_hex_digits_and_parse_back)
{
    uint8_t id[BERTH_ID_LEN], back[BERTH_ID_LEN];
    for (int i = 0; i < BERTH_ID_LEN; i++)
        id[i] = (uint8_t)(i * 17 + 3);
    char s[BERTH_ID_STR_LEN + 1];
    store_id_format(id, s);
    cr_assert_eq(strlen(s), 32);
    cr_assert_eq(store_id_parse(s, back), BERTH_OK);
    cr_assert_arr_eq(id, back, BERTH_ID_LEN);
    cr_assert_eq(store_id_parse("0123", back), BERTH_EINVAL);
    cr_assert_eq(store_id_parse("zz000000000000000000000000000000", back), BERTH_EINVAL);
    cr_assert_eq(store_id_parse(NULL, back), BERTH_EINVAL);
    /* a bad digit anywhere, a byte past ASCII, one digit too many */
    cr_assert_eq(store_id_parse("0000000000000000000000000000000g", back), BERTH_EINVAL);
    cr_assert_eq(store_id_parse("00000000000000"
                                "\xff"
                                "00000000000000000",
                                back),
                 BERTH_EINVAL);
    cr_assert_eq(store_id_parse("000000000000000000000000000000000", back), BERTH_EINVAL);
    cr_assert_eq(store_id_parse("00000000000000000000000000000:00", back), BERTH_EINVAL);
    /* upper case parses as lower case */
    uint8_t up[BERTH_ID_LEN];
    cr_assert_eq(store_id_parse("ABCDEF0123456789abcdef0123456789", up), BERTH_OK);
    cr_assert_eq(store_id_parse("abcdef0123456789ABCDEF0123456789", back), BERTH_OK);
    cr_assert_arr_eq(up, back, BERTH_ID_LEN);
    cr_assert_eq(up[0], 0xab);
    cr_assert_eq(up[15], 0x89);
}

Test(store_keys, dedup_entries_live_inside_the_horizon_only)
{
    uint8_t v[8];
    store_put_be64(v, 1000);
    cr_assert(store_dedup_alive(v, 8, 1000, 100));
    cr_assert(store_dedup_alive(v, 8, 1099, 100));
    cr_assert_not(store_dedup_alive(v, 8, 1100, 100));
    cr_assert(store_dedup_alive(v, 8, 500, 100), "a time ahead of the clock is fresh");
    cr_assert_not(store_dedup_alive(v, 7, 1000, 100), "too short to carry a time");
}
