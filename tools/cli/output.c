/*
 * output.c — how berth prints what every command may print: JSON strings,
 * payloads (text when they are text, base64 always), the names of codes,
 * verdicts and states, a refusal, and "done". The command files print
 * their own answers with these; the bytes they write are the CLI's
 * interface (scripts read --json, people read the rest), so a change here
 * is a change to every command's output.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "tools/cli/cli.h"

void cli_json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void cli_json_cstr(FILE *f, const char *s)
{
    if (s == NULL)
        fputs("null", f);
    else
        cli_json_str(f, s, strlen(s));
}

bool cli_is_text(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n || (c < 0x20 && c != '\n' && c != '\t'))
            return false;
        for (size_t k = 1; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

char *cli_base64(const uint8_t *p, size_t n)
{
    size_t len = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(len);
    if (out != NULL)
        sodium_bin2base64(out, len, p, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

/* ---- names ---- */

const char *cli_code_name(int code)
{
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    return code >= 0 && code <= 16 ? names[code] : "?";
}

const char *cli_verdict_name(int v)
{
    static const char *names[] = {"", "LOCK_LOST", "LOCK_HELD", "TERMINAL", "NOT_FOUND"};
    return v >= 0 && v <= 4 ? names[v] : "?";
}

const char *cli_task_state_name(int s)
{
    static const char *const names[] = {"UNSPECIFIED", "READY",    "LOCKED",
                                        "BACKOFF",     "TERMINAL", "DELAYED"};
    return s >= 0 && s <= 5 ? names[s] : "UNKNOWN";
}

const char *cli_instance_state_name(int s)
{
    static const char *const names[] = {"UNSPECIFIED", "WAITING", "BACKOFF", "RESOLVED", "FAILED"};
    return s >= 0 && s <= 4 ? names[s] : "UNKNOWN";
}

/* ---- statuses and outcomes ---- */

void cli_print_status_json(FILE *f, const Berth__V1__Status *s)
{
    fprintf(f, "{\"code\":%d,\"code_name\":\"%s\",\"message\":", s->code, cli_code_name(s->code));
    cli_json_cstr(f, s->message);
    if (s->has_verdict && s->verdict)
        fprintf(f, ",\"verdict\":\"%s\"", cli_verdict_name(s->verdict));
    if (s->engine_code != NULL) {
        fputs(",\"engine_code\":", f);
        cli_json_cstr(f, s->engine_code);
    }
    if (s->has_retryable)
        fprintf(f, ",\"retryable\":%s", s->retryable ? "true" : "false");
    if (s->field != NULL) {
        fputs(",\"field\":", f);
        cli_json_cstr(f, s->field);
    }
    if (s->has_limit)
        fprintf(f, ",\"limit\":%" PRIu64, s->limit);
    fputc('}', f);
}

int cli_refused(const opts *o, const Berth__V1__Status *s)
{
    if (o->json) {
        fputs("{\"status\":", stdout);
        cli_print_status_json(stdout, s);
        fputs("}\n", stdout);
        return EX_REFUSED;
    }
    fprintf(stderr, "berth: %s: %s", cli_code_name(s->code), s->message ? s->message : "");
    if (s->has_verdict && s->verdict)
        fprintf(stderr, " [verdict %s]", cli_verdict_name(s->verdict));
    if (s->field != NULL)
        fprintf(stderr, " [field %s", s->field);
    if (s->field != NULL && s->has_limit)
        fprintf(stderr, ", limit %" PRIu64, s->limit);
    if (s->field != NULL)
        fputc(']', stderr);
    if (s->engine_code != NULL)
        fprintf(stderr, " [%s, %s]", s->engine_code,
                s->retryable ? "retryable" : "retrying will not help");
    fputc('\n', stderr);
    return EX_REFUSED;
}

int cli_print_ok(const opts *o, const char *what, const char *extra_json)
{
    if (o->json)
        printf("{\"ok\":true%s%s}\n", extra_json ? "," : "", extra_json ? extra_json : "");
    else
        printf("%s\n", what);
    return EX_OK;
}

void cli_print_payload_json(const char *name, ProtobufCBinaryData p)
{
    if (cli_is_text(p.data, p.len)) {
        printf(",\"%s\":", name);
        cli_json_str(stdout, (const char *)p.data, p.len);
    }
    char *b64 = cli_base64(p.data, p.len);
    printf(",\"%s_base64\":", name);
    cli_json_cstr(stdout, b64 ? b64 : "");
    free(b64);
}

void cli_print_error_json(const char *name, const Berth__V1__Error *e)
{
    if (e == NULL)
        return;
    printf(",\"%s\":{\"code\":", name);
    cli_json_cstr(stdout, e->code);
    printf(",\"message\":");
    cli_json_cstr(stdout, e->message);
    printf(",\"details\":");
    cli_json_cstr(stdout, e->details);
    putchar('}');
}
