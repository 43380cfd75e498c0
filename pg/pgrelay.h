/*
 * pgrelay.h — a turn's part of the outbox relay on PostgreSQL (R3, R4;
 * pg/README.md §3.8): push channels across replicas. Semantics are the
 * embedded store's (engine/relay.c); the database holds the state.
 *
 *   IN        a submit or call routed to a push channel writes its
 *             delivery, an outbox row, instead of a task (pgsubmit,
 *             pgcall), and the turn claims (below) and rings "o:".
 *   THE CLAIM last in a turn (but the gate): per push channel of each
 *             deployment the replica's copy holds, up to the room the
 *             replica has on it (push_inflight_max less its own sends
 *             unanswered), the due rows not in flight, in seq order, FOR
 *             UPDATE SKIP LOCKED: whichever replica comes first, never
 *             two. Each gets a new flight number (a sequence: unique
 *             across replicas) and, as its due_at, its answer's deadline;
 *             the actor sends them once the turn has COMMITTED, so no
 *             other replica sends them meanwhile and one killed mid-send
 *             leaves rows the next claim after their deadline takes.
 *   ANSWERS   ENGINE_OP_PUSH_ACK (the sending replica's turn): round one
 *             counts the answer once under (delivery, flight) in
 *             berth.inbox and locks the delivery if it still carries that
 *             flight (else: the answer to a send that has ended, ignored),
 *             then its call (instances_lock); between the rounds
 *             DELIVERED ends it (a call's result through intake and
 *             rules_correlate: refused, an incident RESULT_REFUSED),
 *             REJECT ends it (task.refused; a call resolved with the
 *             error, or FAILED when its policy names the code), RETRY is
 *             a failed attempt.
 *   DEADLINES a turn that relays because one came (the actor's instant, or
 *             housekeeping) first locks the sends past their deadline
 *             (outbox_expired, SKIP LOCKED): each a failed attempt.
 *   FAILED    backed off on the outbox curve, or poisoned at
 *             delivery_attempts (an incident, delivery.poisoned; a call's
 *             request: its timer is set to now, and the next housekeeping
 *             turn fails that attempt, as the embedded store tells it in
 *             the turn after).
 *   REARM     retry_delivery: a poisoned row due now from attempt 0 (its
 *             deployment drains again if it had retired), claimed in the
 *             same turn.
 *
 * Internal to pg/'s turn modules and the actor. The actor thread only.
 */
#ifndef BERTH_PG_PGRELAY_H
#define BERTH_PG_PGRELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "pg/pgplan.h"

enum { PGRELAY_ENDED = 0, PGRELAY_BACKED_OFF = 1, PGRELAY_POISONED = 2 };

/* PUSH_ACK and RETRY_DELIVERY join the turn (or p is settled, refused). */
void pgrelay_plan(pgops_turn *t, pgreq *p);
/* Round one: the answers' rows and the sends past their deadline, locked
 * (before instances_lock); the re-arms. */
bool pgrelay_stmt_first(pgops_turn *t);
/* The deliveries the turn's answers name (instances_lock's $2): their ids
 * into ids (t->acks of them at most); how many. */
size_t pgrelay_ack_ids(const pgops_turn *t, uint8_t (*ids)[BERTH_ID_LEN]);
/* Whether the turn claims (its channels' room is taken until it ends). */
bool pgrelay_claims(const pgops_turn *t);
/* Whether the turn takes two rounds for the relay. */
bool pgrelay_in(const pgops_turn *t);
/* Whether the turn ends deliveries (the gate runs last). */
bool pgrelay_ends(const pgops_turn *t);
/* Between the rounds: the decisions on the rows round one locked. */
bool pgrelay_between(pgops_turn *t, pgturn *pt);
/* Round two: what the decisions write (after instances_write). */
bool pgrelay_stmt_writes(pgops_turn *t);
/* Last but the gate: the claim and when the next delivery comes due. */
bool pgrelay_stmt_claim(pgops_turn *t);
/* After COMMIT: the answers, events and counts of the turn's relay. */
void pgrelay_answer(pgops_turn *t, pgreq *p);
void pgrelay_events(pgops_turn *t);
/* After COMMIT: in how many ms the next delivery comes due (UINT64_MAX:
 * none that the turn knows of). */
uint64_t pgrelay_next_in(const pgops_turn *t);
/* After COMMIT: each send the turn claimed, in seq order, handed to
 * fn(ctx, d, deadline_ms) with the transport of its channel in deps
 * (none: not sent, its deadline makes it a failed attempt). */
void pgrelay_each_send(const pgops_turn *t, const pgdeploys *deps,
                       void (*fn)(void *ctx, const engine_push_delivery *d, uint32_t deployment),
                       void *ctx);

#endif
