/*
 * mem.h — every allocation the engine makes, and the seam that fails one.
 *
 * The engine allocates only through these, so a test can make the n-th
 * allocation from now fail (engine_fault_alloc() in engine.h) and walk n
 * through a workload: every path that can run out of memory is then run
 * out of memory once. Disarmed, the seam costs one relaxed atomic load.
 * Any thread. Free with free().
 *
 * VEC(T) is the one growable array of the engine (the turn's staged
 * lists): VEC_ADD() returns a slot for one more element, or NULL when
 * there is no memory (the array is then unchanged).
 */
#ifndef BERTH_ENGINE_MEM_H
#define BERTH_ENGINE_MEM_H

#include <stddef.h>
#include <stdlib.h>

void *mem_alloc(size_t n); /* n may be 0 */
void *mem_calloc(size_t n, size_t size);
void *mem_realloc(void *p, size_t n);
char *mem_strdup(const char *s); /* NULL → NULL (and never fails for it) */
void *mem_dup(const void *p, size_t n);
/* n zeroed bytes for an array that is read at random (a hash map's
 * slots): from 4 MiB on, aligned to and advised into 2 MiB pages, so that
 * a probe does not also miss the TLB. */
void *mem_calloc_big(size_t n);

#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t n, cap;                                                                             \
    }
void *mem_vec_add(void **v, size_t *n, size_t *cap, size_t elem);
#define VEC_ADD(vec) mem_vec_add((void **)&(vec)->v, &(vec)->n, &(vec)->cap, sizeof((vec)->v[0]))
#define VEC_FREE(vec)                                                                              \
    do {                                                                                           \
        free((vec)->v);                                                                            \
        (vec)->v = NULL;                                                                           \
        (vec)->n = (vec)->cap = 0;                                                                 \
    } while (0)

#endif
