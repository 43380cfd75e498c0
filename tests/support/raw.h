/*
 * raw.h — berthd's operate surface spoken by hand (proto/sp_wire.h), for
 * the suites that must do what a library would not: pipeline requests,
 * send broken frames, hang up mid-request. Each helper fails the test on
 * a transport error.
 */
#ifndef BERTH_TESTS_RAW_H
#define BERTH_TESTS_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "berth/v1/operate.pb-c.h"

/* A TCP connection to url's port on loopback (receive timeout 10 s). */
int raw_connect(const char *url);
void raw_read_all(int fd, void *p, size_t n);
void raw_write_all(int fd, const void *p, size_t n);
/* Connects and exchanges the SP headers as a REQ peer. */
int raw_req(const char *url);
/* Connects and exchanges the SP headers as a SUB peer. berthd's PUB sends
 * every event to every subscriber (a SUB filters on its own side), so a
 * subscriber must be able to hang up while an event is arriving: with
 * libnng 1.5.2 closing a SUB socket at that instant can wait forever for
 * a receive that never completes. Here hanging up is close(2). */
int raw_sub(const char *url);
/* The next event whose subject starts with prefix (the others skipped), as
 * published: subject, NUL, an encoded Event. malloc'd; *len its length.
 * Fails the test when none comes within 10 s. */
uint8_t *raw_event(int fd, const char *prefix, size_t *len);
/* A frame: 64-bit length, the request id (high bit set), the body. */
size_t raw_frame(uint8_t *out, uint32_t id, const uint8_t *body, size_t len);
/* Reads one answer: its request id, and its Response (free_unpacked). */
Berth__V1__Response *raw_answer(int fd, uint32_t *id);
/* One request and its answer on an open connection (a fetch of a topic
 * nobody uses, not waiting): asserts the id echoed and an OK. */
void raw_round_trip(int fd, uint32_t id);
/* A packed fetch of max tasks of topic, waiting wait_ms (worker "raw"). */
size_t raw_pack_fetch(uint8_t *out, const char *topic, uint32_t max, uint64_t wait_ms);

/* A REQ peer over tls+tcp:// (mbed TLS, the certificate not checked): the
 * handshake done and the SP headers exchanged. Written by hand, as
 * raw_req, so that it can hang up with requests in flight (nng 1.5.2's
 * own REQ socket can then wait for good in its close). */
typedef struct raw_tls raw_tls;
raw_tls *raw_tls_req(const char *url);
void raw_tls_write(raw_tls *t, const void *p, size_t n);
/* Reads one answer, as raw_answer. */
Berth__V1__Response *raw_tls_answer(raw_tls *t, uint32_t *id);
/* Hangs up (no TLS close_notify: close(2), as a peer that goes) and frees. */
void raw_tls_hang_up(raw_tls *t);

#endif
