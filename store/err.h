/*
 * err.h — the one error convention shared by every layer of berth.
 *
 * Functions return int: 0 (BERTH_OK) is success, a negative BERTH_E* code
 * names the failure, and berth_strerror() turns it into text. Results come
 * back through out-parameters, listed last. It lives in store/ because the
 * store is the lowest layer; engine/ and gateway/ include it from here.
 */
#ifndef BERTH_STORE_ERR_H
#define BERTH_STORE_ERR_H

enum {
    BERTH_OK = 0,
    BERTH_ENOMEM = -1,   /* an allocation failed */
    BERTH_EIO = -2,      /* a store read or write failed; nothing was applied */
    BERTH_ECORRUPT = -3, /* a stored record or key did not decode */
    BERTH_ENOTFOUND = -4,
    BERTH_EINVAL = -5,  /* an argument or a setting is out of its range */
    BERTH_ECLOSED = -6, /* the engine has stopped (a halted one still answers, UNAVAILABLE) */
    BERTH_EFORMAT = -7, /* the on-disk format version is not one this build reads */
};

const char *berth_strerror(int rv);

#endif
