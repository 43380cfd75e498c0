/* Text is UTF-8 with no NUL byte (engine/utf8.h), named cases. */
#include <string.h>

#include <criterion/criterion.h>

#include "engine/utf8.h"
#include "tests/support/harness.h"

typedef struct utf8_case {
    const char *name;
    const char *bytes;
    size_t len;
    size_t valid; /* the longest well-formed prefix */
} utf8_case;

#define C(name, lit, valid)                                                                        \
    {                                                                                              \
        name, lit, sizeof(lit) - 1, valid                                                          \
    }
static const utf8_case cases[] = {
    C("empty", "", 0),
    C("ascii", "order-1", 7),
    C("two bytes", "caf\xc3\xa9", 5),
    C("three bytes", "\xe2\x82\xac", 3),
    C("four bytes", "\xf0\x9f\x98\x80", 4),
    C("the last code point", "\xf4\x8f\xbf\xbf", 4),
    C("NUL inside", "order-1\0A", 7),
    C("NUL first", "\0X", 0),
    C("lone continuation", "a\x80", 1),
    C("C0 overlong", "\xc0\xaf", 0),
    C("C1 overlong", "\xc1\xbf", 0),
    C("E0 overlong", "\xe0\x80\xaf", 0),
    C("F0 overlong", "\xf0\x80\x80\xaf", 0),
    C("surrogate", "\xed\xa0\x80", 0),
    C("past U+10FFFF", "\xf4\x90\x80\x80", 0),
    C("F5", "\xf5\x80\x80\x80", 0),
    C("FF", "ok\xff", 2),
    C("cut after the lead byte", "ab\xe2\x82", 2),
    C("bad second continuation", "\xe2\x82\x41", 0),
    C("long ascii", "0123456789abcdefghij", 20),
    C("a NUL in a long run", "0123456789\0abcdefgh", 10),
    C("a bad byte after long runs", "0123456789abcdef\xff", 16),
    C("a character between runs",
      "01234567\xc3\xa9"
      "89abcdefgh",
      20),
};

Test(utf8, named_cases)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const utf8_case *c = &cases[i];
        size_t got = utf8_valid_prefix((const uint8_t *)c->bytes, c->len);
        cr_expect_eq(got, c->valid, "%s: %zu, expected %zu", c->name, got, c->valid);
        cr_expect_eq(utf8_valid((const uint8_t *)c->bytes, c->len), c->valid == c->len, "%s",
                     c->name);
    }
}

Test(utf8, a_cut_keeps_whole_characters)
{
    char s[] = "price: 12\xe2\x82"; /* a euro sign cut after two of its bytes */
    utf8_cut(s);
    cr_assert_str_eq(s, "price: 12");
    char t[] = "caf\xc3\xa9";
    utf8_cut(t);
    cr_assert_str_eq(t, "caf\xc3\xa9");
    char u[] = "\"aa\xe2\x82\" is not accepted"; /* cut inside, then more text */
    utf8_cut(u);
    cr_assert_str_eq(u, "\"aa\" is not accepted");
}

TestSuite(text_in_process, .init = h_setup, .fini = h_teardown);

Test(text_in_process, the_engine_rejects_text_that_is_not_utf8)
{
    engine_reply *r = h_submit_key("t", "p", "key\xff");
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "idempotency_key");
    engine_reply_free(r);
    r = h_fetch("w\xc3", "t", 1, 0);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert_str_eq(r->status.field, "worker_id");
    engine_reply_free(r);
    cr_assert_eq(h_stats().tasks, 0);
}

Test(text_in_process, a_message_that_echoes_input_is_cut_at_a_character)
{
    /* 63 ASCII bytes then a 3-byte character: "%.64s" would cut it. */
    char ct[80];
    memset(ct, 'a', 63);
    memcpy(ct + 63, "\xe2\x82\xac", 4);
    H.o.channels = (engine_channel[]){{.name = "strict",
                                       .content_types = (const char *const[]){"application/json"},
                                       .n_content_types = 1}};
    H.o.n_channels = 1;
    h_reopen();
    char id[ENGINE_ID_STR], tok[ENGINE_ID_STR];
    h_submit("strict", "p", id);
    h_fetch_one("w", "strict", 0, NULL, tok);
    engine_result res = {.payload = (const uint8_t *)"{}", .payload_len = 2, .content_type = ct};
    engine_request req = {.op = ENGINE_OP_COMPLETE};
    req.u.complete = (engine_complete_args){{id, "w", tok}, &res};
    engine_reply *r = h_exec(&req);
    h_expect_code(r, ENGINE_CODE_INVALID_ARGUMENT);
    cr_assert(strstr(r->status.message, "aaaa\" is not accepted on channel strict"), "%s",
              r->status.message);
    cr_assert(utf8_valid((const uint8_t *)r->status.message, strlen(r->status.message)), "%s",
              r->status.message);
    engine_reply_free(r);
}
